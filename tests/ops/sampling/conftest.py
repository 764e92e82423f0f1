"""The sampling kernels call many small jit helpers; under the interpreter
each call used to re-patch triton.language (see
`kunlun_triton.runtime.interpreter_speed`)."""

import os

if os.environ.get("TRITON_INTERPRET") == "1":
    from kunlun_triton.runtime.interpreter_speed import skip_repeated_patching

    skip_repeated_patching()
