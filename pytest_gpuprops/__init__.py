"""pytest-gpuprops: GPU micro-architecture facts as pytest tests.

Layers (one module each): compile -> sass -> measure -> facts -> assertions -> report; plugin.py
wires them to pytest. Each layer imports only the ones before it and works without pytest.
"""

__version__ = "0.1.0"
