package androidx.appcompat.app;
public class AppCompatActivity extends androidx.activity.ComponentActivity {}
