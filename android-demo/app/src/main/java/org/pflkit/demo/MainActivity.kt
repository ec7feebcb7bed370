package org.pflkit.demo

import android.content.Intent
import android.os.Bundle
import android.view.View
import android.widget.Button
import android.widget.ImageView
import android.widget.LinearLayout
import android.widget.RadioButton
import android.widget.RadioGroup
import android.widget.SeekBar
import android.widget.TextView
import androidx.activity.enableEdgeToEdge
import androidx.activity.result.contract.ActivityResultContracts
import androidx.activity.viewModels
import androidx.appcompat.app.AppCompatActivity
import org.pflkit.core.ModelCard

/**
 * The classify screen: the exported model's top-3 classes for the bundled sample or a picked
 * image, with latency; a lambda slider for SuPerFed runtime-lambda models; FedRoD's generic and
 * personalized predictions side by side. State lives in [DemoViewModel]: a rotation only
 * rebinds the views.
 */
class MainActivity : AppCompatActivity() {
    private val model: DemoViewModel by viewModels()

    private val pickImage = registerForActivityResult(ActivityResultContracts.GetContent()) { uri ->
        uri?.let { model.showPicked(it) }
    }

    override fun onCreate(savedInstanceState: Bundle?) {
        enableEdgeToEdge()
        super.onCreate(savedInstanceState)
        setContentView(R.layout.activity_main)
        findViewById<View>(R.id.root).padForSystemBars()
        val modelInfo = findViewById<TextView>(R.id.model_info)
        val formats = findViewById<RadioGroup>(R.id.formats)
        val preview = findViewById<ImageView>(R.id.preview)
        val lambdaRow = findViewById<View>(R.id.lambda_row)
        val lambdaLabel = findViewById<TextView>(R.id.lambda_label)
        val lambdaSlider = findViewById<SeekBar>(R.id.lambda_slider)
        val primaryTitle = findViewById<TextView>(R.id.primary_title)
        val primaryResult = findViewById<TextView>(R.id.primary_result)
        val genericColumn = findViewById<LinearLayout>(R.id.generic_column)
        val genericResult = findViewById<TextView>(R.id.generic_result)
        val latency = findViewById<TextView>(R.id.latency)

        findViewById<Button>(R.id.sample_button).setOnClickListener { model.showSample() }
        findViewById<Button>(R.id.pick_button).setOnClickListener { pickImage.launch("image/*") }
        findViewById<Button>(R.id.personalize_button).setOnClickListener {
            startActivity(Intent(this, PersonalizeActivity::class.java))
        }
        lambdaSlider.max = DemoViewModel.SLIDER_STEPS
        lambdaSlider.setOnSeekBarChangeListener(object : SeekBar.OnSeekBarChangeListener {
            override fun onProgressChanged(bar: SeekBar, progress: Int, fromUser: Boolean) {
                model.onSlider(progress, fromUser)
                model.setup.value?.slider?.let {
                    lambdaLabel.text = getString(R.string.lambda_value, it.value())
                }
            }

            override fun onStartTrackingTouch(bar: SeekBar) = Unit
            override fun onStopTrackingTouch(bar: SeekBar) = Unit
        })

        model.setup.observe(this) { setup ->
            modelInfo.text = describe(setup.card)
            formats.removeAllViews()
            for (artifact in setup.models) {
                formats.addView(RadioButton(this).apply {
                    text = listOfNotNull(artifact.file, artifact.precision).joinToString(" · ")
                    id = View.generateViewId()
                    isChecked = artifact === setup.selected
                    setOnClickListener { model.select(artifact) }
                })
            }
            val slider = setup.slider
            lambdaRow.visibility = if (slider != null) View.VISIBLE else View.GONE
            if (slider != null) {
                lambdaSlider.progress = slider.position()  // fromUser = false: λ stays exact
                lambdaLabel.text = getString(R.string.lambda_value, slider.value())
            }
            val twoHeads = setup.card.output(ModelCard.GENERIC_OUTPUT) != null
            genericColumn.visibility = if (twoHeads) View.VISIBLE else View.GONE
            primaryTitle.setText(if (twoHeads) R.string.personalized else R.string.prediction)
        }
        model.preview.observe(this) { preview.setImageBitmap(it) }
        model.prediction.observe(this) { p ->
            primaryResult.text = p.primary
            p.generic?.let { genericResult.text = it }
            latency.text = p.latency
        }
        model.message.observe(this) { latency.text = it }
    }

    private fun describe(card: ModelCard): String {
        val detail = card.mixture?.summary ?: "plain model"
        val pre = card.preprocessing
        return "${card.algorithm} · ${card.model} · $detail\n" +
            "input ${pre.channels}×${pre.height}×${pre.width}, ${card.classes.size} classes"
    }
}
