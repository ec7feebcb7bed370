"""The app's ExecuTorch stubs are held to ExecuTorch's real signatures (kotlin_api.py).

The app once called ``TrainingModule.destroy()``, which only the hand-written stub had (the real
class has ``close()``): it compiled here and not against the AAR. check.sh now refuses any stub
declaration missing from ``executorch-api.txt``, the list extracted from ExecuTorch's sources.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

TOOLS = Path(__file__).resolve().parents[2] / "android-demo/tools/kotlin-check"
_spec = importlib.util.spec_from_file_location("kotlin_api", TOOLS / "kotlin_api.py")
assert _spec is not None and _spec.loader is not None
kotlin_api = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(kotlin_api)

API = TOOLS / "executorch-api.txt"
STUBS = sorted((TOOLS / "kotlin-stubs").glob("executorch*.kt"))


def test_the_committed_executorch_stubs_declare_only_real_signatures() -> None:
    assert len(STUBS) == 2
    assert kotlin_api.check(API, STUBS) == []


def test_an_invented_method_in_a_stub_is_refused(tmp_path: Path) -> None:
    training = next(s for s in STUBS if s.name == "executorch_training.kt")
    invented = tmp_path / training.name
    invented.write_text(training.read_text().replace(
        "    override fun close() = Unit\n", "    fun destroy() = Unit\n"))
    assert kotlin_api.check(API, [invented]) == [
        "executorch_training.kt: org.pytorch.executorch.training.TrainingModule: "
        "fun destroy(): Unit"]


def test_a_changed_type_or_nullability_is_refused(tmp_path: Path) -> None:
    stub = tmp_path / "executorch.kt"
    stub.write_text("package org.pytorch.executorch\n"
                    "class EValue private constructor() {\n"
                    "    fun toTensor(): Tensor? = null\n"
                    "}\n")
    assert kotlin_api.check(API, [stub]) == [
        "executorch.kt: org.pytorch.executorch.EValue: fun toTensor(): Tensor?"]


def test_declarations_reads_the_shapes_ktfmt_writes() -> None:
    src = '''
        package a.b

        import java.io.Closeable

        /** A class { with braces in comments } */
        @Experimental
        open class Thing
        @Keep
        private constructor(
            @JvmField val code: Int,
            hidden: String,
        ) : Closeable, Base("x{") {
          private val secret = 1

          val isSet: Boolean
            @Keep get() = code == 1

          open fun run(name: String, vararg rest: Long,): Array<String> =
              arrayOf("}")

          override fun close() {
            if (code > 0) { println('{') }
          }

          internal class Hidden(val x: Int) {
            fun shown(): Int = x
          }

          companion object {
            const val MODE = 0

            @JvmStatic
            @JvmOverloads
            fun load(path: String?, mode: Int = MODE): Thing = Thing(mode, path!!)

            private fun helper() = Unit
          }
        }
    '''
    assert kotlin_api.declarations(src) == [
        "a.b: open class Thing : Closeable, Base",
        "a.b.Thing: val code: Int",
        "a.b.Thing: val isSet: Boolean",
        "a.b.Thing: open fun run(name: String, vararg rest: Long): Array<String>",
        "a.b.Thing: fun close(): Unit",
        "a.b.Thing.Companion: const val MODE = 0",
        "a.b.Thing.Companion: fun load(path: String?, mode: Int = MODE): Thing",
    ]


def test_an_undeclared_return_type_is_not_taken_for_unit() -> None:
    assert kotlin_api.declarations("package p\nfun f() = g()\nfun u() = Unit\n") == [
        "p: fun f(): ?", "p: fun u(): Unit"]
