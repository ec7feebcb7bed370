// pflkit Android demo: an app that runs a model exported by `pfl-export` (ExecuTorch .pte or
// ONNX), and its platform-free Java core, which the host tests with `make android-core-test`.
pluginManagement {
    repositories {
        google()
        mavenCentral()
        gradlePluginPortal()
    }
}

dependencyResolutionManagement {
    repositoriesMode.set(RepositoriesMode.FAIL_ON_PROJECT_REPOS)
    repositories {
        google()
        mavenCentral()
    }
}

rootProject.name = "pflkit-android-demo"
include(":core", ":app")
