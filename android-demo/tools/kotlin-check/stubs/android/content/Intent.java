package android.content;
public class Intent { public Intent(Context packageContext, Class<?> cls) {} }
