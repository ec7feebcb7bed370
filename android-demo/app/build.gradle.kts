plugins {
    alias(libs.plugins.android.application)
    alias(libs.plugins.kotlin.android)
}

android {
    namespace = "org.pflkit.demo"
    compileSdk = 36

    defaultConfig {
        applicationId = "org.pflkit.demo"
        // ExecuTorch's native library is built for API 26 (Android 8.0); ModelLoader still
        // falls back to the .onnx if it cannot load.
        minSdk = 26
        targetSdk = 36
        versionCode = 1
        versionName = "0.1.0"
        // The ExecuTorch AAR ships arm64-v8a and x86_64 only; ONNX Runtime would add 32-bit
        // ABIs on which the .pte path could not load.
        ndk { abiFilters += listOf("arm64-v8a", "x86_64") }
    }

    buildTypes {
        release {
            isMinifyEnabled = false
        }
    }

    compileOptions {
        sourceCompatibility = JavaVersion.VERSION_17
        targetCompatibility = JavaVersion.VERSION_17
    }

    // Models may also be bundled under assets/model/; keep them uncompressed.
    androidResources {
        noCompress += listOf("pte", "onnx")
    }
}

kotlin {
    compilerOptions {
        jvmTarget.set(org.jetbrains.kotlin.gradle.dsl.JvmTarget.JVM_17)
    }
}

dependencies {
    implementation(project(":core"))
    implementation(libs.executorch.android)
    implementation(libs.onnxruntime.android)
    implementation(libs.androidx.appcompat)
    implementation(libs.androidx.activity.ktx)
    implementation(libs.androidx.core.ktx)
    implementation(libs.androidx.lifecycle.viewmodel.ktx)
    implementation(libs.androidx.lifecycle.livedata.ktx)
}
