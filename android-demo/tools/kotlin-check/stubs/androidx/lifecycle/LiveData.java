package androidx.lifecycle;
public abstract class LiveData<T> {
  public void observe(LifecycleOwner owner, Observer<? super T> observer) {}
  public T getValue() { return null; }
  protected void postValue(T value) {}
  protected void setValue(T value) {}
}
