package org.pflkit.demo

import android.os.Bundle
import android.view.View
import android.widget.ArrayAdapter
import android.widget.Button
import android.widget.EditText
import android.widget.ImageView
import android.widget.Spinner
import android.widget.TextView
import androidx.activity.enableEdgeToEdge
import androidx.activity.result.contract.ActivityResultContracts
import androidx.activity.viewModels
import androidx.appcompat.app.AppCompatActivity

/**
 * The personalize screen: label a few images, train the personal part on the phone with the
 * export's ExecuTorch training program, see held-out accuracy before and after; optionally
 * take part in a federated round. State lives in [PersonalizeViewModel].
 */
class PersonalizeActivity : AppCompatActivity() {
    private val model: PersonalizeViewModel by viewModels()

    private val pickImage = registerForActivityResult(ActivityResultContracts.GetContent()) { uri ->
        uri?.let { model.showPicked(it) }
    }

    override fun onCreate(savedInstanceState: Bundle?) {
        enableEdgeToEdge()
        super.onCreate(savedInstanceState)
        setContentView(R.layout.activity_personalize)
        findViewById<View>(R.id.root).padForSystemBars()
        val preview = findViewById<ImageView>(R.id.preview)
        val classes = findViewById<Spinner>(R.id.class_choice)
        val counts = findViewById<TextView>(R.id.sample_counts)
        val status = findViewById<TextView>(R.id.status)
        val server = findViewById<EditText>(R.id.server_url)
        val token = findViewById<EditText>(R.id.enrollment_token)

        findViewById<Button>(R.id.sample_button).setOnClickListener { model.showSample() }
        findViewById<Button>(R.id.pick_button).setOnClickListener { pickImage.launch("image/*") }
        findViewById<Button>(R.id.add_sample).setOnClickListener {
            model.label(classes.selectedItemPosition)
        }
        findViewById<Button>(R.id.clear_samples).setOnClickListener { model.clearSamples() }
        findViewById<Button>(R.id.train_button).setOnClickListener { model.personalize() }
        findViewById<Button>(R.id.reset_button).setOnClickListener { model.reset() }
        findViewById<Button>(R.id.join_button).setOnClickListener {
            model.joinRound(server.text.toString().trim(), token.text.toString().trim())
        }

        model.classes.observe(this) { names ->
            classes.adapter = ArrayAdapter(this, android.R.layout.simple_spinner_dropdown_item,
                names)
        }
        model.preview.observe(this) { preview.setImageBitmap(it) }
        model.sampleCounts.observe(this) { counts.text = it }
        model.status.observe(this) { status.text = it }
    }
}
