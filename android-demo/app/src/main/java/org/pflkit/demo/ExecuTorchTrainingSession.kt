package org.pflkit.demo

import java.io.Closeable
import java.io.File
import org.pflkit.core.TrainingSection
import org.pflkit.core.personal.ParameterWriter
import org.pflkit.core.personal.RecipeRunner
import org.pflkit.core.personal.ProgramInput
import org.pflkit.core.personal.TrainingSession
import org.pytorch.executorch.EValue
import org.pytorch.executorch.Module
import org.pytorch.executorch.Tensor
import org.pytorch.executorch.training.SGD
import org.pytorch.executorch.training.TrainingModule

/**
 * The core's [TrainingSession] on ExecuTorch's training runtime: the card's `train` method
 * through [TrainingModule] (forward + backward in one call), one [SGD] per optimizer of the
 * recipe (new ones for each walk of the recipe, [newOptimizers]), `prepare` (frozen,
 * inference) through a [Module] on the same file. Everything else (schedule, splits, lambda,
 * accuracy) is the host-tested core's [RecipeRunner]. [open] closes what it loaded when a later
 * step fails; [close] closes both modules (an [SGD] has no close in ExecuTorch 1.5: its native
 * optimizer is freed when it is garbage-collected).
 */
class ExecuTorchTrainingSession private constructor(
    private val module: TrainingModule,
    private val prepareModule: Module?,
    private val recipe: TrainingSection,
    private val imageShape: LongArray,
) : TrainingSession, Closeable {
    private val parameters: Map<String, Tensor>
    private var optimizers: Map<String, SGD>  // new ones per walk: momentum starts at zero
    private val writer: SGD

    init {
        // executorch 1.5.1: namedParameters exists only after a first forward_backward (it
        // computes gradients on zero inputs and changes no weight)
        val zeros = FloatArray(imageShape.fold(1L) { a, b -> a * b }.toInt())
        val runner = RecipeRunner(recipe, this, imageShape)
        val warmup = runner.batch(runner.prepare(zeros, longArrayOf(0)), intArrayOf(0), 0f)
        val outputs = module.executeForwardBackward(recipe.trainMethod,
            *evalues(warmup).toTypedArray())
        // labels are checked against the card's class count: the program must score as many
        val logits = outputs.getOrNull(1)?.toTensor()?.shape()
        check(logits != null && logits.contentEquals(longArrayOf(1, recipe.classes.toLong()))) {
            "the program's logits for one row are ${logits?.contentToString()}, the card " +
                "declares ${recipe.classes} classes (training.outputs)"
        }
        parameters = module.namedParameters(recipe.trainMethod)
        check(parameters.keys == recipe.parameterNames().toSet()) {
            "the program's parameters ${parameters.keys.sorted()} differ from the card's " +
                "${recipe.parameterNames().sorted()}"
        }
        optimizers = createOptimizers()
        writer = SGD.create(parameters, 1.0)  // ParameterWriter's lr-1 steps
    }

    companion object {
        /** Load [program] for [recipe]; whatever was loaded is closed again if a step fails. */
        fun open(program: File, recipe: TrainingSection, imageShape: LongArray):
            ExecuTorchTrainingSession {
            val module = TrainingModule.load(program.absolutePath)
            var prepareModule: Module? = null
            try {
                prepareModule = recipe.prepareMethod?.let { Module.load(program.absolutePath) }
                return ExecuTorchTrainingSession(module, prepareModule, recipe, imageShape)
            } catch (e: Throwable) {
                runCatching { closeAll(prepareModule, module) }.exceptionOrNull()
                    ?.let(e::addSuppressed)
                throw e
            }
        }

        /** Close each of [resources]; the first failure is thrown, the others suppressed. */
        private fun closeAll(vararg resources: Closeable?) {
            var failure: Throwable? = null
            for (resource in resources) {
                try {
                    resource?.close()
                } catch (e: Throwable) {
                    failure?.addSuppressed(e) ?: run { failure = e }
                }
            }
            failure?.let { throw it }
        }
    }

    override fun prepare(images: FloatArray, rows: Int): List<FloatArray> {
        val method = checkNotNull(recipe.prepareMethod) { "this program reads the images" }
        val input = Tensor.fromBlob(images, longArrayOf(rows.toLong(), *imageShape))
        return checkNotNull(prepareModule).execute(method, EValue.from(input))
            .map { it.toTensor().dataAsFloatArray }
    }

    /** One [SGD] per optimizer of the recipe, over its parameters. */
    private fun createOptimizers(): Map<String, SGD> = recipe.optimizers.associate { o ->
        o.name to SGD.create(o.parameters.associateWith { parameters.getValue(it) },
            o.lr, o.momentum, o.dampening, o.weightDecay, o.nesterov)
    }

    override fun newOptimizers() {
        optimizers = createOptimizers()
    }

    override fun step(optimizer: String, inputs: List<ProgramInput>): Float {
        val outputs = module.executeForwardBackward(recipe.trainMethod,
            *evalues(inputs).toTypedArray())
        optimizers.getValue(optimizer).step(module.namedGradients(recipe.trainMethod))
        return outputs[0].toTensor().dataAsFloatArray[0]
    }

    /** The `logits` output; the gradients computed on the way are not applied. */
    override fun logits(inputs: List<ProgramInput>): FloatArray =
        module.executeForwardBackward(recipe.trainMethod, *evalues(inputs).toTypedArray())[1]
            .toTensor().dataAsFloatArray

    override fun weights(): Map<String, FloatArray> =
        parameters.mapValues { it.value.dataAsFloatArray }

    override fun loadWeights(weights: Map<String, FloatArray>) {
        ParameterWriter.write(object : ParameterWriter.Optimizer {
            override fun read(): Map<String, FloatArray> = weights()

            override fun step(gradients: Map<String, FloatArray>) = writer.step(
                gradients.mapValues { (name, g) ->
                    Tensor.fromBlob(g, parameters.getValue(name).shape())
                })
        }, weights)
    }

    override fun close() = closeAll(prepareModule, module)

    private fun evalues(inputs: List<ProgramInput>): List<EValue> = inputs.map { input ->
        val floats = input.floats
        EValue.from(
            if (floats != null) Tensor.fromBlob(floats, input.shape)
            else Tensor.fromBlob(input.longs, input.shape)
        )
    }
}
