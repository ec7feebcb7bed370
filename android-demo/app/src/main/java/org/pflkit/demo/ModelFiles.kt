package org.pflkit.demo

import android.content.Context
import java.io.File
import java.io.FileNotFoundException
import java.io.InputStream
import org.pflkit.core.ArtifactCheck
import org.pflkit.core.BundledFiles
import org.pflkit.core.ModelCard

/**
 * An exported model on the device: `model_card.json` and the artifacts it lists, in one folder.
 *
 * Looked up in the app's external files (`adb push` target, no permission needed), then in
 * `assets/model/`, installed once per app version into internal storage (both runtimes load
 * from a file path) by the core's [BundledFiles]: atomically, so a start interrupted mid-copy
 * never checks a half-written file against its card.
 */
class ModelFiles private constructor(val dir: File, val card: ModelCard) {

    /** Model files the card lists and the device has: ExecuTorch first, fp32 before int8. */
    fun models(): List<ModelCard.Artifact> = card.models().filter { File(dir, it.file).isFile }

    /** The file of a model artifact, after checking its size and sha256 against the card. */
    fun verified(artifact: ModelCard.Artifact): File {
        val file = File(dir, artifact.file)
        file.inputStream().use { ArtifactCheck.verify(it, artifact) }
        return file
    }

    companion object {
        const val CARD = "model_card.json"
        private const val ASSET_DIR = "model"

        fun pushTarget(context: Context): File? = context.getExternalFilesDir(ASSET_DIR)

        /** Find the model; the exception message says where to put one. */
        fun locate(context: Context): ModelFiles {
            pushTarget(context)?.let { dir ->
                if (File(dir, CARD).isFile) return load(dir)
            }
            val bundled = context.assets.list(ASSET_DIR).orEmpty()
            if (CARD in bundled) {
                val dir = File(context.filesDir, ASSET_DIR)
                BundledFiles.install(AssetSource(context, bundled.toList()), dir)
                return load(dir)
            }
            throw FileNotFoundException(
                context.getString(R.string.no_model, pushTarget(context)?.absolutePath ?: "?")
            )
        }

        private fun load(dir: File): ModelFiles {
            val card = File(dir, CARD)
            return ModelFiles(dir, ModelCard.read(card.inputStream(), card.path))
        }
    }

    /** The APK's `assets/model/`; a new install or update of the app is a new bundle. */
    private class AssetSource(
        private val context: Context,
        private val names: List<String>,
    ) : BundledFiles.Source {
        override fun names(): List<String> = names

        override fun open(name: String): InputStream = context.assets.open("$ASSET_DIR/$name")

        override fun version(): String =
            context.packageManager.getPackageInfo(context.packageName, 0).lastUpdateTime
                .toString()
    }
}
