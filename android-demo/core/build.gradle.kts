// Plain Java, no Android dependency: the app uses it unchanged and the host tests it with
// `make android-core-test` (javac + JUnit 4, no Gradle). Java 8 language and library level,
// so nothing in it is missing on an Android minSdk 24 device.
plugins {
    `java-library`
}

java {
    sourceCompatibility = JavaVersion.VERSION_1_8
    targetCompatibility = JavaVersion.VERSION_1_8
}

// The tests use Java 17 features (lambdas over interfaces, diamond with anonymous classes).
tasks.named<JavaCompile>("compileTestJava") {
    sourceCompatibility = "17"
    targetCompatibility = "17"
}

dependencies {
    testImplementation(libs.junit)
}
