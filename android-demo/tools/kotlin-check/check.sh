#!/bin/sh
# Compile-check the Kotlin app (android-demo/app) on the host, without the Android SDK: the
# Kotlin compiler from PyPI's kotlin-jupyter-kernel (a dev dependency) compiles the app's
# sources against the real core, an R class generated from res/ (make_r.py), and signature
# stubs of the Android, AndroidX, ExecuTorch and ONNX Runtime APIs the app calls (stubs/,
# kotlin-stubs/: signatures written from their public APIs, no code). The ExecuTorch stubs
# must declare nothing that executorch-api.txt (ExecuTorch's own signatures, kotlin_api.py)
# lacks. It checks names, types, overloads and resource ids; it does not check Android's
# nullability annotations, resource values, the manifest or anything at run time
# (docs/android.md).
set -eu
here=$(cd "$(dirname "$0")" && pwd)
demo=$(cd "$here/../.." && pwd)
repo=$(cd "$demo/.." && pwd)
venv=${PFLKIT_VENV:-$repo/.venv}
jars=$("$venv/bin/python" -c 'import pathlib, run_kotlin_kernel as k; print(pathlib.Path(k.__file__).parent / "jars")') || {
  echo "no Kotlin compiler: pip install kotlin-jupyter-kernel (part of pflkit[dev])" >&2; exit 2; }
compiler=$(ls "$jars"/kotlin-jupyter-kernel-*-all.jar)
stdlib=$(ls "$jars"/kotlin-stdlib-*.jar)
"$venv/bin/python" "$here/kotlin_api.py" check "$here/executorch-api.txt" \
  "$here"/kotlin-stubs/executorch*.kt
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
"$venv/bin/python" "$here/make_r.py" "$demo/app/src/main/res" "$out/gen/R.java"
javac --release 17 -nowarn -d "$out/classes" "$out/gen/R.java" \
  $(find "$here/stubs" "$demo/core/src/main/java" -name '*.java')
java -cp "$compiler" org.jetbrains.kotlin.cli.jvm.K2JVMCompiler -no-stdlib -no-reflect \
  -jvm-target 17 -Werror -cp "$stdlib:$out/classes" -d "$out/kotlin" \
  "$here"/kotlin-stubs/*.kt $(find "$demo/app/src/main/java" -name '*.kt')
echo "android-demo/app: $(find "$demo/app/src/main/java" -name '*.kt' | wc -l) Kotlin files compile"
