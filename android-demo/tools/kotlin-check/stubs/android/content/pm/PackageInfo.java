package android.content.pm;
public class PackageInfo { public long lastUpdateTime; }
