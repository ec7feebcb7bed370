package androidx.lifecycle;
public class MutableLiveData<T> extends LiveData<T> {
  @Override public void postValue(T value) {}
  @Override public void setValue(T value) {}
}
