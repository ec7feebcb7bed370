// Plain Java, no Android dependency: the app uses it unchanged and the host tests it with
// `make android-core-test` (javac + JUnit 4, no Gradle). Main code compiles with --release 8,
// like run-tests.sh, so no Java 9+ library call slips in that an Android 7.0 device lacks.
plugins {
    `java-library`
}

tasks.named<JavaCompile>("compileJava") {
    options.release.set(8)
}

// The tests use Java 17 (lambdas over Classifier.Backend, diamond with anonymous classes).
tasks.named<JavaCompile>("compileTestJava") {
    options.release.set(17)
}

dependencies {
    testImplementation(libs.junit)
}
