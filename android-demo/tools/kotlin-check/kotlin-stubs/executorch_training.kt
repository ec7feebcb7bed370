// ExecuTorch's training API (org.pytorch.executorch.training) as the app calls it: signatures
// only, each held by check.sh to executorch-api.txt. SGD has no close(): its native optimizer
// goes when the object is garbage-collected.
package org.pytorch.executorch.training

import java.io.Closeable
import org.pytorch.executorch.EValue
import org.pytorch.executorch.Tensor
import org.pytorch.executorch.stub

class TrainingModule private constructor() : Closeable {
    fun executeForwardBackward(methodName: String, vararg inputs: EValue): Array<EValue> = stub()

    fun namedParameters(methodName: String): Map<String, Tensor> = stub()

    fun namedGradients(methodName: String): Map<String, Tensor> = stub()

    override fun close() = Unit

    companion object {
        @JvmStatic
        fun load(modelPath: String): TrainingModule = stub()
    }
}

class SGD private constructor() {
    fun step(namedGradients: Map<String, Tensor>) = Unit

    companion object {
        @JvmStatic
        fun create(
            namedParameters: Map<String, Tensor>,
            learningRate: Double,
            momentum: Double,
            dampening: Double,
            weightDecay: Double,
            nesterov: Boolean,
        ): SGD = stub()

        @JvmStatic
        fun create(namedParameters: Map<String, Tensor>, learningRate: Double): SGD = stub()
    }
}
