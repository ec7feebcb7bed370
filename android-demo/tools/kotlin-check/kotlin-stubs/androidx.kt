// Kotlin-only AndroidX APIs the app calls (extension functions), as signatures.
@file:JvmName("ActivityStubs")

package androidx.activity

import androidx.lifecycle.ViewModel

@Suppress("UNUSED_PARAMETER")
inline fun <reified VM : ViewModel> ComponentActivity.viewModels(): Lazy<VM> =
    throw UnsupportedOperationException("compile-check stub")

fun ComponentActivity.enableEdgeToEdge() = Unit
