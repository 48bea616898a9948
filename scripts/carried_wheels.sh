# Sourced by the GPU scripts: install the wheels carried in .whl/ (a machine without
# internet) into a temporary site directory and put it on PYTHONPATH.
if ls .whl/*.whl >/dev/null 2>&1; then
  carried_site=$(mktemp -d)
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target "$carried_site" .whl/*.whl \
    && export PYTHONPATH=$carried_site${PYTHONPATH:+:$PYTHONPATH}
fi
