package org.pflkit.demo

import android.content.Context
import java.io.File
import java.io.FileNotFoundException
import org.pflkit.core.ArtifactCheck
import org.pflkit.core.ModelCard

/**
 * An exported model on the device: `model_card.json` and the artifacts it lists, in one folder.
 *
 * Looked up in the app's external files (`adb push` target, no permission needed), then in
 * `assets/model/` (copied to internal storage, since both runtimes load from a file path).
 */
class ModelFiles private constructor(private val dir: File, val card: ModelCard) {

    /** The artifact of a format ("pte" or "onnx") after checking size and sha256, or null. */
    fun artifact(format: String): File? {
        val entry = card.artifact(format) ?: return null
        val file = File(dir, entry.file)
        if (!file.isFile) return null
        file.inputStream().use { ArtifactCheck.verify(it, entry) }
        return file
    }

    /** Formats present on the device, ExecuTorch first (the primary runtime). */
    fun formats(): List<String> =
        listOf(PTE, ONNX).filter { card.artifact(it)?.let { a -> File(dir, a.file).isFile } == true }

    companion object {
        const val PTE = "pte"
        const val ONNX = "onnx"
        private const val CARD = "model_card.json"
        private const val ASSET_DIR = "model"

        fun pushTarget(context: Context): File? = context.getExternalFilesDir(ASSET_DIR)

        /** Find the model; the exception message says where to put one. */
        fun locate(context: Context): ModelFiles {
            pushTarget(context)?.let { dir ->
                if (File(dir, CARD).isFile) return load(dir)
            }
            val assets = context.assets.list(ASSET_DIR).orEmpty()
            if (CARD in assets) {
                val dir = File(context.filesDir, ASSET_DIR).apply { mkdirs() }
                for (name in assets) {
                    context.assets.open("$ASSET_DIR/$name").use { input ->
                        File(dir, name).outputStream().use { input.copyTo(it) }
                    }
                }
                return load(dir)
            }
            throw FileNotFoundException(
                context.getString(R.string.no_model, pushTarget(context)?.absolutePath ?: "?")
            )
        }

        private fun load(dir: File): ModelFiles =
            ModelFiles(dir, ModelCard.parse(File(dir, CARD).readText(Charsets.UTF_8)))
    }
}
