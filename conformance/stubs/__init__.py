"""Family B's domain: layer objects as builders read them, and their test doubles.

- `protocol`: the attributes an MLA metadata builder reads from its layers, and the
  reference layer classes;
- `recorder`: a recording proxy that logs every attribute a builder reads;
- `factory`: layer stubs built from the model config, completeness checks;
- `protocol_diff`: a builder's recorded layer reads diffed with its declared protocol.
"""

from __future__ import annotations
