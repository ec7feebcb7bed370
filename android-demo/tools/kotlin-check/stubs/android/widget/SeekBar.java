package android.widget;
public class SeekBar extends android.view.View {
  public interface OnSeekBarChangeListener {
    void onProgressChanged(SeekBar seekBar, int progress, boolean fromUser);
    void onStartTrackingTouch(SeekBar seekBar);
    void onStopTrackingTouch(SeekBar seekBar);
  }
  public SeekBar(android.content.Context context) { super(context); }
  public synchronized int getMax() { return 0; }
  public synchronized void setMax(int max) {}
  public synchronized int getProgress() { return 0; }
  public synchronized void setProgress(int progress) {}
  public void setOnSeekBarChangeListener(OnSeekBarChangeListener l) {}
}
