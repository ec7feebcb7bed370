package org.pflkit.demo

import android.app.Application
import android.graphics.Bitmap
import android.net.Uri
import androidx.lifecycle.AndroidViewModel
import androidx.lifecycle.LiveData
import androidx.lifecycle.MutableLiveData
import java.util.Locale
import java.util.concurrent.ExecutorService
import java.util.concurrent.Executors
import java.util.concurrent.atomic.AtomicInteger
import org.pflkit.core.Classifier
import org.pflkit.core.LambdaControl
import org.pflkit.core.LambdaSlider
import org.pflkit.core.ModelCard
import org.pflkit.core.ModelLoader
import org.pflkit.core.Probabilities

/**
 * Everything the classify screen holds, kept across rotations: the model is found, verified
 * and loaded once per process, not once per `onCreate`. All model work runs on one background
 * thread; only the newest request runs, so dragging the slider never queues stale inferences.
 */
class DemoViewModel(app: Application) : AndroidViewModel(app) {
    /** What the screen shows about the loaded model. */
    data class Setup(
        val card: ModelCard,
        val models: List<ModelCard.Artifact>,
        val selected: ModelCard.Artifact?,
        val slider: LambdaSlider?,
    )

    /** One classification, formatted. */
    data class Prediction(val primary: String, val generic: String?, val latency: String)

    private val worker: ExecutorService = Executors.newSingleThreadExecutor()
    private val latestRequest = AtomicInteger()

    // written on the worker, read on both threads
    @Volatile private var files: ModelFiles? = null
    @Volatile private var backend: Backend? = null
    @Volatile private var image: Bitmap? = null
    @Volatile private var slider: LambdaSlider? = null

    private val _setup = MutableLiveData<Setup>()
    private val _preview = MutableLiveData<Bitmap>()
    private val _prediction = MutableLiveData<Prediction>()
    private val _message = MutableLiveData<String>()
    val setup: LiveData<Setup> = _setup
    val preview: LiveData<Bitmap> = _preview
    val prediction: LiveData<Prediction> = _prediction
    val message: LiveData<String> = _message

    init {
        worker.execute { load() }
    }

    override fun onCleared() {
        worker.execute { backend?.close() }
        worker.shutdown()
    }

    fun showSample() = worker.execute { show(Images.sample(getApplication())) }

    fun showPicked(uri: Uri) = worker.execute { show(Images.decode(getApplication(), uri)) }

    /** Switch to another model file of the card. */
    fun select(artifact: ModelCard.Artifact) = worker.execute {
        open(listOf(artifact))
        classifyNow()
    }

    /** The slider moved; programmatic moves (rotation, set-up) keep the exact lambda. */
    fun onSlider(position: Int, fromUser: Boolean) {
        if (slider?.onProgress(position, fromUser) == true) {
            val request = latestRequest.incrementAndGet()
            worker.execute { if (request == latestRequest.get()) classifyNow() }
        }
    }

    /** Background: find and verify the model, open the first file that loads, classify. */
    private fun load() {
        val found = try {
            ModelFiles.locate(getApplication())
        } catch (e: Exception) {
            return _message.postValue(e.message)
        }
        files = found
        val card = found.card
        slider = if (card.hasRuntimeLambda()) LambdaSlider(LambdaControl(card), SLIDER_STEPS) else null
        if (found.models().isEmpty()) {
            _message.postValue(getApplication<Application>().getString(R.string.no_artifact))
        }
        open(found.models())
        show(Images.sample(getApplication()))
    }

    /** Background: the first of [candidates] whose runtime loads; say why others did not. */
    private fun open(candidates: List<ModelCard.Artifact>) {
        val found = files ?: return
        backend?.close()
        backend = null
        val loaded = ModelLoader.openFirst(candidates) { artifact ->
            Backend.open(artifact, found.verified(artifact), found.card)
        }
        backend = loaded.backend
        _setup.postValue(Setup(found.card, found.models(), loaded.artifact, slider))
        if (loaded.failures.isNotEmpty()) {
            _message.postValue(getApplication<Application>().getString(
                R.string.load_failed, loaded.failures.joinToString("\n")))
        }
    }

    private fun show(bitmap: Bitmap?) {
        if (bitmap == null) {
            return _message.postValue(getApplication<Application>().getString(R.string.decode_failed))
        }
        image = bitmap
        _preview.postValue(bitmap)
        classifyNow()
    }

    /** Background thread only. */
    private fun classifyNow() {
        val model = backend ?: return
        val card = files?.card ?: return
        val bitmap = image ?: return
        val result = try {
            val raw = Images.raw(bitmap, card.preprocessing)
            Classifier(card, model).classify(raw, bitmap.height, bitmap.width, slider?.value(), TOP_K)
        } catch (e: Exception) {
            return _message.postValue(
                getApplication<Application>().getString(R.string.inference_failed, e.message))
        }
        _prediction.postValue(Prediction(
            format(card, result.topK.getValue(card.outputs[0].name)),
            result.topK[ModelCard.GENERIC_OUTPUT]?.let { format(card, it) },
            getApplication<Application>().getString(R.string.latency, model.label,
                result.inferenceNanos / 1e6, result.preprocessNanos / 1e6),
        ))
    }

    private fun format(card: ModelCard, top: List<Probabilities.Ranked>): String =
        top.joinToString("\n") { r ->
            String.format(Locale.US, "%-14s %5.1f %%", card.classes[r.index], 100 * r.probability)
        }

    companion object {
        const val SLIDER_STEPS = 100
        private const val TOP_K = 3
    }
}
