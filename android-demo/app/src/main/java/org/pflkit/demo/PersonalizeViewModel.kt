package org.pflkit.demo

import android.app.Application
import android.graphics.Bitmap
import android.net.Uri
import androidx.lifecycle.AndroidViewModel
import androidx.lifecycle.LiveData
import androidx.lifecycle.MutableLiveData
import java.io.File
import java.util.Locale
import java.util.concurrent.ExecutorService
import java.util.concurrent.Executors
import org.pflkit.core.ModelCard
import org.pflkit.core.ModelLoader
import org.pflkit.core.TrainingSection
import org.pflkit.core.fl.FederatedClient
import org.pflkit.core.personal.LabeledSamples
import org.pflkit.core.personal.PersonalWeights
import org.pflkit.core.personal.Personalizer
import org.pflkit.core.personal.ProgramRoundTrainer

/**
 * The personalize screen's state, kept across rotations: the card's training program loaded
 * once in ExecuTorch, the user's labelled samples and the personal weights in app storage
 * (`files/personal/`). All work runs on one background thread; the logic (schedule, splits,
 * lambda, held-out accuracy, storage formats, the federated client) is the host-tested core.
 */
class PersonalizeViewModel(app: Application) : AndroidViewModel(app) {
    private val worker: ExecutorService = Executors.newSingleThreadExecutor()
    private val dir = File(app.filesDir, "personal")

    // written on the worker, read on both threads
    @Volatile private var card: ModelCard? = null
    @Volatile private var exportDir: File? = null
    @Volatile private var programSha: String? = null
    @Volatile private var session: ExecuTorchTrainingSession? = null
    @Volatile private var samples: LabeledSamples? = null
    @Volatile private var input: FloatArray? = null
    @Volatile private var lambda = 0.5f

    private val _classes = MutableLiveData<List<String>>()
    private val _preview = MutableLiveData<Bitmap>()
    private val _samples = MutableLiveData<String>()
    private val _status = MutableLiveData<String>()
    val classes: LiveData<List<String>> = _classes
    val preview: LiveData<Bitmap> = _preview
    val sampleCounts: LiveData<String> = _samples
    val status: LiveData<String> = _status

    init {
        worker.execute { load() }
    }

    override fun onCleared() {
        worker.execute { session?.close() }
        worker.shutdown()
    }

    private fun text(id: Int, vararg args: Any?): String =
        getApplication<Application>().getString(id, *args)

    /** Background: the card's training program, the samples, the saved personal weights. */
    private fun load() {
        val files = try {
            ModelFiles.locate(getApplication())
        } catch (e: Exception) {
            return _status.postValue(e.message)
        }
        val plan = files.card.training ?: return _status.postValue(text(R.string.no_trainer))
        card = files.card
        exportDir = files.dir
        _classes.postValue(files.card.classes)
        val shape = imageShape(files.card)
        samples = LabeledSamples.open(dir, shape, files.card.classes.size)
        postCounts()
        val program = files.card.artifacts.firstOrNull { it.file == plan.program }
            ?: return _status.postValue(text(R.string.trainer_not_listed, plan.program))
        // the same fallback rule as the classify screen: a native library that cannot load
        // is an Error, reported instead of killing this thread
        val loaded = ModelLoader.openFirst(listOf(program)) {
            ExecuTorchTrainingSession.open(files.verified(it), plan, shape)
        }
        session = loaded.backend ?: return _status.postValue(
            text(R.string.load_failed, loaded.failures.joinToString("\n")))
        programSha = program.sha256
        restoreWeights(plan)
        _status.postValue(text(R.string.trainer_ready, plan.loss))
        show(Images.sample(getApplication()))
    }

    /** The saved personal weights of this program, else the export's initial ones. */
    private fun restoreWeights(plan: TrainingSection) {
        val saved = PersonalWeights.load(dir, programSha)
        val weights = saved?.let { PersonalWeights.fromTensors(plan, it.tensors, PersonalWeights.FILE) }
            ?: PersonalWeights.initial(plan, checkNotNull(exportDir))
        checkNotNull(session).loadWeights(weights)
        val verified = card?.verifiedLambda ?: Float.NaN
        lambda = (saved?.meta?.get(PersonalWeights.LAMBDA) as? Double)?.toFloat()
            ?: plan.lambda?.fixed?.toFloat()
            ?: if (verified.isNaN()) 0.5f else verified
    }

    fun showSample() = worker.execute { show(Images.sample(getApplication())) }

    fun showPicked(uri: Uri) = worker.execute { show(Images.decode(getApplication(), uri)) }

    private fun show(bitmap: Bitmap?) {
        val c = card ?: return
        if (bitmap == null) return _status.postValue(text(R.string.decode_failed))
        input = Images.input(bitmap, c.preprocessing)
        _preview.postValue(bitmap)
    }

    /** Label the shown image with class [index] and keep it. */
    fun label(index: Int) = worker.execute {
        val x = input ?: return@execute
        samples?.add(x, index)
        postCounts()
    }

    fun clearSamples() = worker.execute {
        samples?.clear()
        postCounts()
    }

    /** Train the personal part on the samples; held-out accuracy before and after. */
    fun personalize() = worker.execute {
        val c = card ?: return@execute
        val plan = c.training ?: return@execute
        val s = session ?: return@execute
        val data = samples ?: return@execute
        if (data.size() < Personalizer.HOLD_OUT_EVERY) {
            return@execute _status.postValue(text(R.string.too_few_samples,
                Personalizer.HOLD_OUT_EVERY))
        }
        _status.postValue(text(R.string.training))
        val report = try {
            Personalizer.run(plan, s, imageShape(c), data.images(), data.labels(), lambda,
                data.size().toLong())
        } catch (e: Exception) {
            return@execute _status.postValue(text(R.string.training_failed, e.message))
        }
        PersonalWeights.save(dir, plan, programSha, report.weights, report.lambdaAfter)
        report.lambdaAfter?.let { lambda = it }
        _status.postValue(describe(report))
    }

    /** Back to the export's initial personal weights. */
    fun reset() = worker.execute {
        val plan = card?.training ?: return@execute
        File(dir, PersonalWeights.FILE).delete()
        restoreWeights(plan)
        _status.postValue(text(R.string.weights_reset))
    }

    /**
     * Poll the federated run once and, when this device is sampled, train and upload its round
     * with this device's samples (possible when the program's parameters are the run's update;
     * the core refuses a personal part). One step, so the screen never waits on the server.
     */
    fun joinRound(server: String, token: String) = worker.execute {
        val c = card ?: return@execute
        val plan = c.training ?: return@execute
        val s = session ?: return@execute
        val data = samples ?: return@execute
        _status.postValue(text(R.string.joining, server))
        val message = try {
            val client = FederatedClient.open(server, File(dir, "federated"))
            if (!client.isEnrolled()) client.enroll(token)
            val trainer = ProgramRoundTrainer(plan, s, imageShape(c), data.images(),
                data.labels(), client.clientId())
            val step = client.step(trainer)
            text(R.string.joined, client.clientId(), step.toString(), step.retryAfterSeconds)
        } catch (e: Exception) {
            text(R.string.join_failed, e.message)
        } finally {
            restoreWeights(plan)  // the round overwrote the program's weights
        }
        _status.postValue(message)
    }

    private fun postCounts() {
        val c = card ?: return
        val counts = samples?.counts() ?: return
        _samples.postValue(c.classes.indices.filter { counts[it] > 0 }
            .joinToString(", ") { "${c.classes[it]} ${counts[it]}" }
            .ifEmpty { text(R.string.no_samples) })
    }

    private fun describe(r: Personalizer.Report): String {
        val lam = if (r.lambdaAfter == null) "" else
            String.format(Locale.US, ", λ %.2f → %.2f", r.lambdaBefore, r.lambdaAfter)
        return text(R.string.personalized_report, 100 * r.accuracyBefore, 100 * r.accuracyAfter,
            r.heldOutRows, r.trainRows, r.steps) + lam
    }

    private fun imageShape(card: ModelCard): LongArray = card.preprocessing.let {
        longArrayOf(it.channels.toLong(), it.height.toLong(), it.width.toLong())
    }
}
