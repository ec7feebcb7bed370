// ExecuTorch's Android API (org.pytorch:executorch-android) as the app calls it: signatures
// only, each held by check.sh to executorch-api.txt (extracted from ExecuTorch's sources).
package org.pytorch.executorch

import java.io.Closeable

internal fun stub(): Nothing = throw UnsupportedOperationException("compile-check stub")

class EValue private constructor() {
    fun toTensor(): Tensor = stub()

    companion object {
        @JvmStatic
        fun from(tensor: Tensor): EValue = stub()
    }
}

open class Module private constructor() : Closeable {
    open fun forward(vararg inputs: EValue): Array<EValue> = stub()

    open fun execute(methodName: String, vararg inputs: EValue): Array<EValue> = stub()

    override fun close() = Unit

    companion object {
        const val LOAD_MODE_FILE = 0

        @JvmStatic
        @JvmOverloads
        fun load(modelPath: String?, loadMode: Int = LOAD_MODE_FILE, numThreads: Int = 0): Module =
            stub()
    }
}

abstract class Tensor internal constructor() {
    fun shape(): LongArray = stub()

    open val dataAsFloatArray: FloatArray
        get() = stub()

    companion object {
        @JvmStatic
        fun fromBlob(data: FloatArray, shape: LongArray): Tensor = stub()

        @JvmStatic
        fun fromBlob(data: LongArray, shape: LongArray): Tensor = stub()
    }
}
