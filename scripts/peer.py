"""Where SpecLab's peer, llama.cpp through PyPI llama-cpp-python, is imported from.

`make peer` (scripts/install_peer.sh) installs a pinned llama-cpp-python into <repo>/.cache/peer.
import_llama_cpp() imports llama_cpp from sys.path as it is (so an llama_cpp the user put on
PYTHONPATH wins) and, failing that, from .cache/peer.
"""
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PEER_DIR = os.path.join(ROOT, ".cache", "peer")


def import_llama_cpp():
    """The llama_cpp module. Raises ImportError naming where it looked, and `make peer`."""
    try:
        import llama_cpp
        return llama_cpp
    except ImportError:
        pass
    if os.path.isdir(PEER_DIR) and PEER_DIR not in sys.path:
        sys.path.append(PEER_DIR)
    try:
        import llama_cpp
    except ImportError as e:
        raise ImportError(f"llama-cpp-python is neither on sys.path nor in {PEER_DIR} "
                          f"(make peer installs it there): {e}") from e
    return llama_cpp
