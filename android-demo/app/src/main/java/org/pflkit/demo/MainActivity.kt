package org.pflkit.demo

import android.graphics.Bitmap
import android.graphics.BitmapFactory
import android.net.Uri
import android.os.Bundle
import android.view.View
import android.widget.Button
import android.widget.ImageView
import android.widget.LinearLayout
import android.widget.RadioButton
import android.widget.RadioGroup
import android.widget.SeekBar
import android.widget.TextView
import androidx.activity.result.contract.ActivityResultContracts
import androidx.appcompat.app.AppCompatActivity
import java.util.Locale
import java.util.concurrent.ExecutorService
import java.util.concurrent.Executors
import java.util.concurrent.atomic.AtomicInteger
import org.pflkit.core.Classifier
import org.pflkit.core.LambdaControl
import org.pflkit.core.ModelCard
import org.pflkit.core.Pixels
import org.pflkit.core.Probabilities

/**
 * Loads the exported model, classifies the bundled sample or a picked image, and shows the
 * top-3 classes with probabilities and latency; a lambda slider for SuPerFed runtime-lambda
 * models; FedRoD's generic and personalized predictions side by side.
 *
 * All model work runs on one background thread; only the newest request runs, so dragging the
 * slider never queues stale inferences.
 */
class MainActivity : AppCompatActivity() {
    private val worker: ExecutorService = Executors.newSingleThreadExecutor()
    private val latestRequest = AtomicInteger()

    // Written on the worker (and lambdaValue by the slider), read on both threads.
    @Volatile private var files: ModelFiles? = null
    @Volatile private var backend: Backend? = null
    @Volatile private var lambda: LambdaControl? = null
    @Volatile private var lambdaValue: Float? = null
    @Volatile private var image: Bitmap? = null

    private lateinit var modelInfo: TextView
    private lateinit var formats: RadioGroup
    private lateinit var preview: ImageView
    private lateinit var lambdaRow: View
    private lateinit var lambdaLabel: TextView
    private lateinit var lambdaSlider: SeekBar
    private lateinit var primaryTitle: TextView
    private lateinit var primaryResult: TextView
    private lateinit var genericColumn: LinearLayout
    private lateinit var genericResult: TextView
    private lateinit var latency: TextView

    private val pickImage = registerForActivityResult(ActivityResultContracts.GetContent()) { uri ->
        uri?.let { worker.execute { show(decode(it)) } }
    }

    override fun onCreate(savedInstanceState: Bundle?) {
        super.onCreate(savedInstanceState)
        setContentView(R.layout.activity_main)
        modelInfo = findViewById(R.id.model_info)
        formats = findViewById(R.id.formats)
        preview = findViewById(R.id.preview)
        lambdaRow = findViewById(R.id.lambda_row)
        lambdaLabel = findViewById(R.id.lambda_label)
        lambdaSlider = findViewById(R.id.lambda_slider)
        primaryTitle = findViewById(R.id.primary_title)
        primaryResult = findViewById(R.id.primary_result)
        genericColumn = findViewById(R.id.generic_column)
        genericResult = findViewById(R.id.generic_result)
        latency = findViewById(R.id.latency)

        findViewById<Button>(R.id.sample_button).setOnClickListener {
            worker.execute { show(sample()) }
        }
        findViewById<Button>(R.id.pick_button).setOnClickListener { pickImage.launch("image/*") }
        lambdaSlider.max = SLIDER_STEPS
        lambdaSlider.setOnSeekBarChangeListener(object : SeekBar.OnSeekBarChangeListener {
            override fun onProgressChanged(bar: SeekBar, progress: Int, fromUser: Boolean) {
                val control = lambda ?: return
                lambdaValue = control.fromSlider(progress, SLIDER_STEPS)
                lambdaLabel.text = getString(R.string.lambda_value, lambdaValue)
                if (fromUser) classify()
            }

            override fun onStartTrackingTouch(bar: SeekBar) = Unit
            override fun onStopTrackingTouch(bar: SeekBar) = Unit
        })
        worker.execute { loadModel() }
    }

    override fun onDestroy() {
        worker.execute { backend?.close() }
        worker.shutdown()
        super.onDestroy()
    }

    /** Background: find the model and card, open the first model file, classify the sample. */
    private fun loadModel() {
        val found = try {
            ModelFiles.locate(this)
        } catch (e: Exception) {
            return runOnUiThread { modelInfo.text = e.message }
        }
        files = found
        val card = found.card
        lambda = if (card.hasRuntimeLambda()) LambdaControl(card) else null
        lambdaValue = lambda?.initial()
        val models = found.models()
        runOnUiThread { setUpFor(card, models) }
        models.firstOrNull()?.let { openBackend(it) }
        show(sample())
    }

    private fun setUpFor(card: ModelCard, available: List<ModelCard.Artifact>) {
        modelInfo.text = describe(card)
        formats.removeAllViews()
        for (artifact in available) {
            formats.addView(RadioButton(this).apply {
                text = listOfNotNull(artifact.file, artifact.precision).joinToString(" · ")
                id = View.generateViewId()
                isChecked = artifact === available.first()
                setOnClickListener { worker.execute { openBackend(artifact); classifyNow() } }
            })
        }
        if (available.isEmpty()) latency.text = getString(R.string.no_artifact)
        val control = lambda
        lambdaRow.visibility = if (control != null) View.VISIBLE else View.GONE
        if (control != null) {
            lambdaSlider.progress = control.toSlider(control.initial(), SLIDER_STEPS)
            lambdaLabel.text = getString(R.string.lambda_value, control.initial())
        }
        val twoHeads = card.output(ModelCard.GENERIC_OUTPUT) != null
        genericColumn.visibility = if (twoHeads) View.VISIBLE else View.GONE
        primaryTitle.setText(if (twoHeads) R.string.personalized else R.string.prediction)
    }

    private fun describe(card: ModelCard): String {
        val mix = card.mixture
        val detail = when (mix?.kind) {
            "superfed" -> {
                val lam = if (mix.runtimeLambda) "λ at runtime" else "λ = ${mix.fixedLambda}"
                "$lam (${mix.mode})"
            }
            "fedrod" -> "${mix.head} head"
            "pflmoe" -> "variant ${mix.variant}"
            else -> "plain model"
        }
        val pre = card.preprocessing
        return "${card.algorithm} · ${card.model} · $detail\n" +
            "input ${pre.channels}×${pre.height}×${pre.width}, ${card.classes.size} classes"
    }

    /** Background thread only. */
    private fun openBackend(artifact: ModelCard.Artifact) {
        val found = files ?: return
        backend?.close()
        backend = try {
            Backend.open(artifact, found.verified(artifact), found.card)
        } catch (e: Exception) {
            val message = getString(R.string.load_failed, artifact.file, e.message)
            runOnUiThread { latency.text = message }
            null
        }
    }

    private fun sample(): Bitmap = assets.open(SAMPLE).use { BitmapFactory.decodeStream(it) }

    /** Decode a picked image, subsampled so a photo does not exhaust memory; null on failure. */
    private fun decode(uri: Uri): Bitmap? = runCatching {
        val bounds = BitmapFactory.Options().apply { inJustDecodeBounds = true }
        contentResolver.openInputStream(uri)?.use { BitmapFactory.decodeStream(it, null, bounds) }
        var sampleSize = 1
        while (maxOf(bounds.outWidth, bounds.outHeight) / (sampleSize * 2) >= MAX_DECODE_SIDE) {
            sampleSize *= 2
        }
        val options = BitmapFactory.Options().apply {
            inSampleSize = sampleSize
            inPreferredConfig = Bitmap.Config.ARGB_8888
        }
        contentResolver.openInputStream(uri)?.use { BitmapFactory.decodeStream(it, null, options) }
    }.getOrNull()

    private fun show(bitmap: Bitmap?) {
        if (bitmap == null) {
            return runOnUiThread { latency.text = getString(R.string.decode_failed) }
        }
        image = bitmap
        runOnUiThread { preview.setImageBitmap(bitmap) }
        classifyNow()
    }

    /** From the UI thread: run on the worker, dropping requests that a newer one superseded. */
    private fun classify() {
        val request = latestRequest.incrementAndGet()
        worker.execute { if (request == latestRequest.get()) classifyNow() }
    }

    /** Background thread only. */
    private fun classifyNow() {
        val model = backend ?: return
        val card = files?.card ?: return
        val bitmap = image ?: return
        val argb = IntArray(bitmap.width * bitmap.height)
        bitmap.getPixels(argb, 0, bitmap.width, 0, 0, bitmap.width, bitmap.height)
        val result = try {
            val raw = Pixels.fromArgb(argb, bitmap.width, bitmap.height, card.preprocessing)
            Classifier(card, model).classify(raw, bitmap.height, bitmap.width, lambdaValue, TOP_K)
        } catch (e: Exception) {
            return runOnUiThread { latency.text = getString(R.string.inference_failed, e.message) }
        }
        runOnUiThread {
            primaryResult.text = format(card, result.topK.getValue(card.outputs[0].name))
            result.topK[ModelCard.GENERIC_OUTPUT]?.let { genericResult.text = format(card, it) }
            latency.text = getString(
                R.string.latency, model.label,
                result.inferenceNanos / 1e6, result.preprocessNanos / 1e6,
            )
        }
    }

    private fun format(card: ModelCard, top: List<Probabilities.Ranked>): String =
        top.joinToString("\n") { r ->
            String.format(Locale.US, "%-14s %5.1f %%", card.classes[r.index], 100 * r.probability)
        }

    private companion object {
        const val SAMPLE = "sample.png"
        const val TOP_K = 3
        const val SLIDER_STEPS = 100
        const val MAX_DECODE_SIDE = 1024
    }
}
