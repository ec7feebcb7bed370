package androidx.activity.result.contract;
public final class ActivityResultContracts {
  public static class GetContent extends ActivityResultContract<String, android.net.Uri> {}
}
