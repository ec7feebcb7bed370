package org.pflkit.demo

import ai.onnxruntime.OnnxTensor
import ai.onnxruntime.OrtEnvironment
import ai.onnxruntime.OrtSession
import java.io.Closeable
import java.io.File
import java.nio.FloatBuffer
import org.pflkit.core.Classifier
import org.pflkit.core.ModelCard
import org.pytorch.executorch.EValue
import org.pytorch.executorch.Module
import org.pytorch.executorch.Tensor

/** A runtime holding one loaded model, as the core's [Classifier] calls it. */
interface Backend : Classifier.Backend, Closeable {
    val label: String

    companion object {
        /**
         * Load [file] in its runtime. A runtime whose native library cannot load throws an
         * Error (UnsatisfiedLinkError, ExceptionInInitializerError): the caller goes through
         * the core's ModelLoader, which catches those and falls back to the next file.
         */
        fun open(artifact: ModelCard.Artifact, file: File, card: ModelCard): Backend =
            when (artifact.format) {
                ModelCard.Artifact.EXECUTORCH -> ExecuTorchBackend(file, card)
                ModelCard.Artifact.ONNX -> OnnxBackend(file, card)
                else -> throw IllegalArgumentException("no runtime for format ${artifact.format}")
            }
    }
}

/** ExecuTorch: `forward` takes the inputs in card order and returns the outputs in card order. */
class ExecuTorchBackend(file: File, private val card: ModelCard) : Backend {
    override val label = "ExecuTorch (.pte)"
    private val module = Module.load(file.absolutePath)

    override fun run(
        image: FloatArray,
        shape: LongArray,
        lambda: FloatArray?,
    ): Map<String, FloatArray> {
        val inputs = mutableListOf(EValue.from(Tensor.fromBlob(image, shape)))
        if (lambda != null) inputs += EValue.from(Tensor.fromBlob(lambda, longArrayOf(1)))
        val outputs = module.forward(*inputs.toTypedArray())
        check(outputs.size == card.outputs.size) {
            "the .pte returned ${outputs.size} outputs, the card declares ${card.outputs.size}"
        }
        return card.outputs.withIndex().associate { (i, spec) ->
            spec.name to outputs[i].toTensor().dataAsFloatArray
        }
    }

    override fun close() = module.close()
}

/** ONNX Runtime: inputs and outputs are addressed by the names the card gives. */
class OnnxBackend(file: File, private val card: ModelCard) : Backend {
    override val label = "ONNX Runtime (.onnx)"
    private val env = OrtEnvironment.getEnvironment()

    // the options are only read while the session is created: close them right away
    private val session = OrtSession.SessionOptions().use { options ->
        env.createSession(file.absolutePath, options)
    }

    override fun run(
        image: FloatArray,
        shape: LongArray,
        lambda: FloatArray?,
    ): Map<String, FloatArray> {
        val feeds = mutableMapOf(card.image.name to tensor(image, shape))
        try {
            if (lambda != null) {
                feeds[card.lambda.name] = tensor(lambda, longArrayOf(1))
            }
            session.run(feeds).use { result ->
                return card.outputs.associate { spec ->
                    val value = result.get(spec.name).orElseThrow {
                        IllegalStateException("the .onnx has no output \"${spec.name}\"")
                    } as OnnxTensor
                    val buffer = value.floatBuffer
                    spec.name to FloatArray(buffer.remaining()).also { buffer.get(it) }
                }
            }
        } finally {
            feeds.values.forEach { it.close() }
        }
    }

    private fun tensor(data: FloatArray, shape: LongArray): OnnxTensor =
        OnnxTensor.createTensor(env, FloatBuffer.wrap(data), shape)

    override fun close() = session.close()
}
