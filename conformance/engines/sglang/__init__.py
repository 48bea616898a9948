"""SGLang's own record, MLA backends and layer, driven inside ``nox -s sglang`` only."""
