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
 * (`files/personal/`). All work runs on one background thread, and whatever fails there is
 * shown on the screen, never thrown; the logic (schedule, splits, lambda, held-out accuracy,
 * storage formats and what to do with a stored file that cannot be used, the federated client)
 * is the host-tested core.
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
        work { load() }
    }

    override fun onCleared() {
        work { session?.close() }
        worker.shutdown()
    }

    private fun text(id: Int, vararg args: Any?): String =
        getApplication<Application>().getString(id, *args)

    /** Run [task] on the worker; an exception it throws becomes the status line. */
    private fun work(task: () -> Unit) = worker.execute {
        try {
            task()
        } catch (e: Exception) {
            _status.postValue(text(R.string.action_failed, e.message ?: e.toString()))
        }
    }

    /** Background: the card's training program, the samples, the saved personal weights. */
    private fun load() {
        val files = try {
            ModelFiles.locate(getApplication())
        } catch (e: Exception) {
            return _status.postValue(e.message)
        }
        val recipe = files.card.training ?: return _status.postValue(text(R.string.no_trainer))
        card = files.card
        exportDir = files.dir
        _classes.postValue(files.card.classes)
        val shape = imageShape(files.card)
        val opened = LabeledSamples.open(dir, shape, files.card.classes.size)
        samples = opened
        postCounts()
        val samplesNote = opened.problem()?.let { "\n" + text(R.string.samples_unusable, it) }
            .orEmpty()
        val program = files.card.artifacts.firstOrNull { it.file == recipe.program }
            ?: return _status.postValue(text(R.string.trainer_not_listed, recipe.program) +
                samplesNote)
        // the same fallback rule as the classify screen: a native library that cannot load
        // is an Error, reported instead of killing this thread
        val loaded = ModelLoader.openFirst(listOf(program)) {
            ExecuTorchTrainingSession.open(files.verified(it), recipe, shape)
        }
        val s = loaded.backend ?: return _status.postValue(
            text(R.string.load_failed, loaded.failures.joinToString("\n")) + samplesNote)
        programSha = program.sha256
        val problem = try {
            restoreWeights(recipe, s)
        } catch (e: Exception) {
            runCatching { s.close() }  // without its personal weights the program is not used
            return _status.postValue(text(R.string.weights_failed, e.message ?: e.toString()) +
                samplesNote)
        }
        session = s
        _status.postValue((problem?.let { text(R.string.weights_not_restored, it) }
            ?: text(R.string.trainer_ready, recipe.loss)) + samplesNote)
        show(Images.sample(getApplication()))
    }

    /**
     * The saved personal weights of this program, else the export's initial ones; returns why
     * saved weights were not used, if they were not.
     */
    private fun restoreWeights(recipe: TrainingSection, s: ExecuTorchTrainingSession): String? {
        val restored = PersonalWeights.restore(recipe, dir, programSha, checkNotNull(exportDir),
            initialListed(recipe), s)
        lambda = restored.lambda ?: exportedLambda(recipe)
        return restored.problem
    }

    /** The card's artifacts entry for the initial personal weights (checked before loading). */
    private fun initialListed(recipe: TrainingSection): ModelCard.Artifact? =
        card?.artifacts?.firstOrNull { it.file == recipe.initialWeights }

    /**
     * The card's lambda to start from: the recipe's fixed one, else the verified one when it is
     * a lambda of the program (in [0, 1], which the core requires), else the middle.
     */
    private fun exportedLambda(recipe: TrainingSection): Float {
        val verified = card?.verifiedLambda ?: Float.NaN
        return recipe.lambda?.fixed?.toFloat() ?: if (verified in 0f..1f) verified else 0.5f
    }

    fun showSample() = work { show(Images.sample(getApplication())) }

    fun showPicked(uri: Uri) = work { show(Images.decode(getApplication(), uri)) }

    private fun show(bitmap: Bitmap?) {
        val c = card ?: return
        if (bitmap == null) return _status.postValue(text(R.string.decode_failed))
        input = Images.input(bitmap, c.preprocessing)
        _preview.postValue(bitmap)
    }

    /** Label the shown image with class [index] and keep it. */
    fun label(index: Int) = work {
        val x = input ?: return@work
        samples?.add(x, index)
        postCounts()
    }

    fun clearSamples() = work {
        samples?.clear()
        postCounts()
    }

    /** Train the personal part on the samples; held-out accuracy before and after. */
    fun personalize() = work {
        val c = card ?: return@work
        val recipe = c.training ?: return@work
        val s = session ?: return@work _status.postValue(text(R.string.no_program))
        val data = samples ?: return@work
        if (data.size() < Personalizer.HOLD_OUT_EVERY) {
            return@work _status.postValue(text(R.string.too_few_samples,
                Personalizer.HOLD_OUT_EVERY))
        }
        _status.postValue(text(R.string.training))
        val report = try {
            Personalizer.run(recipe, s, imageShape(c), data.images(), data.labels(), lambda,
                data.size().toLong())
        } catch (e: Exception) {
            return@work _status.postValue(text(R.string.training_failed, e.message))
        }
        PersonalWeights.save(dir, recipe, programSha, report.weights, report.lambdaAfter)
        report.lambdaAfter?.let { lambda = it }
        _status.postValue(describe(report))
    }

    /** Back to the export's initial personal weights. */
    fun reset() = work {
        val recipe = card?.training ?: return@work
        val s = session ?: return@work _status.postValue(text(R.string.no_program))
        PersonalWeights.reset(recipe, dir, checkNotNull(exportDir), initialListed(recipe), s)
        lambda = exportedLambda(recipe)
        _status.postValue(text(R.string.weights_reset))
    }

    /**
     * Poll the federated run once and, when this device is sampled, train and upload its round
     * with this device's samples (possible when the program's parameters are the run's update;
     * the core refuses a personal part). One step, so the screen never waits on the server.
     */
    fun joinRound(server: String, token: String) = work {
        val c = card ?: return@work
        val recipe = c.training ?: return@work
        val s = session ?: return@work _status.postValue(text(R.string.no_program))
        val data = samples ?: return@work
        // as pfl-client refuses a device without rows before enrolling: a round needs one
        if (data.size() == 0) return@work _status.postValue(text(R.string.too_few_samples, 1))
        _status.postValue(text(R.string.joining, server))
        val message = try {
            val client = FederatedClient.open(server, File(dir, "federated"))
            if (!client.isEnrolled()) client.enroll(token)
            val trainer = ProgramRoundTrainer(recipe, s, imageShape(c), data.images(),
                data.labels(), client.clientId())
            val step = client.step(trainer)
            text(R.string.joined, client.clientId(), step.toString(), step.retryAfterSeconds)
        } catch (e: Exception) {
            text(R.string.join_failed, e.message)
        }
        // the round overwrote the program's weights
        val problem = restoreWeights(recipe, s)
        _status.postValue(problem?.let { message + "\n" + text(R.string.weights_not_restored, it) }
            ?: message)
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
