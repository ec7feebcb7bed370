#!/bin/sh
# Build and test the Android demo's platform-free core on the host: javac + JUnit 4 from
# Debian (apt-get install junit4), no Gradle, no Android SDK, no network.
# Main sources compile with --release 8 so no Java 9+ library call slips in that an
# Android device lacks; tests use Java 17. The federated-client tests start a real pfl-server
# from the virtualenv PFLKIT_VENV (default: the repository's .venv, which `make setup` creates).
set -eu
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
venv=$(cd "${PFLKIT_VENV:-$repo/.venv}" 2>/dev/null && pwd) || venv="${PFLKIT_VENV:-$repo/.venv}"
junit=/usr/share/java/junit4.jar
hamcrest=/usr/share/java/hamcrest-core.jar
for jar in "$junit" "$hamcrest"; do
  [ -f "$jar" ] || { echo "missing $jar: apt-get install -y junit4" >&2; exit 2; }
done
command -v javac >/dev/null || { echo "javac not found: apt-get install -y openjdk-17-jdk-headless" >&2; exit 2; }
out=$(mktemp -d)  # private build dir: several checkouts/engineers may run this at once
trap 'rm -rf "$out"' EXIT
javac --release 8 -Xlint:all -Xlint:-options -Werror -d "$out/main" \
  $(find "$here/src/main/java" -name '*.java')
javac --release 17 -Xlint:all -Werror -cp "$out/main:$junit" -d "$out/test" \
  $(find "$here/src/test/java" -name '*.java')
tests=$(cd "$here/src/test/java" && find . -name '*Test.java' | sed 's|^\./||; s|\.java$||; s|/|.|g' | sort)
java -Dpflkit.venv="$venv" -Dpflkit.root="$repo" \
  -cp "$out/main:$out/test:$here/src/test/resources:$junit:$hamcrest" org.junit.runner.JUnitCore $tests
