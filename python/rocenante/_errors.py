# SPDX-License-Identifier: BSD-3-Clause
"""Python exceptions for rocenante's result codes.

Every failed library call raises a subclass of RocenanteError whose message
names the call and the library's reason (rcnGetLastError); ``code`` holds the
rcnResult_t value. Bad arguments caught in Python raise ValueError or TypeError
naming the argument.
"""


class RocenanteError(RuntimeError):
    """A rocenante call failed; ``code`` is its rcnResult_t."""

    code = -1

    def __init__(self, message: str, code: int = -1):
        super().__init__(message)
        if code >= 0:
            self.code = code


class UnhandledCudaError(RocenanteError):
    code = 1


class SystemError_(RocenanteError):
    """rcnSystemError: an operating-system call failed."""

    code = 2


class InternalError(RocenanteError):
    code = 3


class InvalidArgumentError(RocenanteError, ValueError):
    code = 4


class InvalidUsageError(RocenanteError):
    code = 5


class RemoteError(RocenanteError):
    """A peer is gone or did not arrive in time (or the communicator was aborted)."""

    code = 6


_BY_CODE = {cls.code: cls for cls in (UnhandledCudaError, SystemError_, InternalError, InvalidArgumentError,
                                      InvalidUsageError, RemoteError)}


def error_for(code: int, message: str) -> RocenanteError:
    """The exception for a result code (called by the extension)."""
    return _BY_CODE.get(code, RocenanteError)(message, code)
