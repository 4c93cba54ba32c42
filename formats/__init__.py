"""Every binary layout bpfsym reads or writes, declared once with construct.

No I/O and no kernel access here. Installed as ``bpfsym.formats``.
"""

from .errors import FormatError

__all__ = ["FormatError"]
