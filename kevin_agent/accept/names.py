"""File and class names of an accepted kernel, and how Python imports the files."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path


def snake_case(name: str) -> str:
    """``FusedBlock`` -> ``fused_block``, ``MLPBlock`` -> ``mlp_block``, ``Conv2dReLU`` -> ``conv2d_relu``."""
    spaced = re.sub(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])", "_", name)
    return re.sub(r"_+", "_", spaced).strip("_").lower() or "module"


@dataclass(frozen=True)
class ArtifactNames:
    """For ``FusedBlock``: fused_block_kernel.cu/.cpp, fused_block_cuda.py, test_fused_block_cuda.py."""

    class_name: str  # the user's class, e.g. FusedBlock
    directory: Path  # where the files go (absolute)

    @property
    def stem(self) -> str:
        return snake_case(self.class_name)

    @property
    def drop_in_class(self) -> str:
        return f"{self.class_name}CUDA"

    @property
    def module_path(self) -> Path:
        return self.directory / f"{self.stem}_cuda.py"

    @property
    def test_path(self) -> Path:
        return self.directory / f"test_{self.stem}_cuda.py"

    def kernel_stem(self, index: int) -> str:
        """The first extension is ``<stem>_kernel``; further ones ``<stem>_kernel_2``, ..."""
        return f"{self.stem}_kernel" if index == 0 else f"{self.stem}_kernel_{index + 1}"

    def kernel_path(self, index: int, suffix: str) -> Path:
        return self.directory / f"{self.kernel_stem(index)}{suffix}"


def import_location(path: Path) -> tuple[Path, str]:
    """(folder to put on sys.path, dotted module name) for a Python file, following __init__.py."""
    path = path.resolve()
    parts = [path.stem]
    folder = path.parent
    while (folder / "__init__.py").is_file() and folder.parent != folder:
        parts.insert(0, folder.name)
        folder = folder.parent
    return folder, ".".join(parts)
