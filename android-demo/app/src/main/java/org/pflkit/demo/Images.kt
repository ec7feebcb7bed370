package org.pflkit.demo

import android.content.Context
import android.graphics.Bitmap
import android.graphics.BitmapFactory
import android.net.Uri
import org.pflkit.core.Pixels
import org.pflkit.core.Preprocessing

/** Images for both screens: the bundled sample, picked photos, and their model input. */
object Images {
    private const val SAMPLE = "sample.png"
    private const val MAX_DECODE_SIDE = 1024

    fun sample(context: Context): Bitmap =
        context.assets.open(SAMPLE).use { BitmapFactory.decodeStream(it) }

    /** Decode a picked image, subsampled so a photo does not exhaust memory; null on failure. */
    fun decode(context: Context, uri: Uri): Bitmap? = runCatching {
        val resolver = context.contentResolver
        val bounds = BitmapFactory.Options().apply { inJustDecodeBounds = true }
        resolver.openInputStream(uri)?.use { BitmapFactory.decodeStream(it, null, bounds) }
        var sampleSize = 1
        while (maxOf(bounds.outWidth, bounds.outHeight) / (sampleSize * 2) >= MAX_DECODE_SIDE) {
            sampleSize *= 2
        }
        val options = BitmapFactory.Options().apply {
            inSampleSize = sampleSize
            inPreferredConfig = Bitmap.Config.ARGB_8888
        }
        resolver.openInputStream(uri)?.use { BitmapFactory.decodeStream(it, null, options) }
    }.getOrNull()

    /** Raw pixels (H x W x C in the card's pixel scale) of a bitmap, as the core reads them. */
    fun raw(bitmap: Bitmap, pre: Preprocessing): FloatArray {
        val argb = IntArray(bitmap.width * bitmap.height)
        bitmap.getPixels(argb, 0, bitmap.width, 0, 0, bitmap.width, bitmap.height)
        return Pixels.fromArgb(argb, bitmap.width, bitmap.height, pre)
    }

    /** The model input (NCHW, preprocessed as the card says) of a bitmap. */
    fun input(bitmap: Bitmap, pre: Preprocessing): FloatArray =
        pre.apply(raw(bitmap, pre), bitmap.height, bitmap.width)
}
