"""One version everywhere: the Cargo workspace, every publishable crate's
dependency requirements on its siblings, pyproject.toml, package.json and
the newest CHANGELOG.md entry. Exits 1 naming each mismatch (stdlib only)."""

import json
import pathlib
import re
import sys
import tomllib

root = pathlib.Path(__file__).resolve().parent.parent
cargo = tomllib.loads((root / "Cargo.toml").read_text())
version = cargo["workspace"]["package"]["version"]
found = {"Cargo.toml [workspace.package]": version}
for name, dep in cargo["workspace"]["dependencies"].items():
    if isinstance(dep, dict) and "path" in dep:
        found[f"Cargo.toml [workspace.dependencies] {name}"] = dep.get("version", "<none>")
found["bindings/python/pyproject.toml"] = tomllib.loads(
    (root / "bindings/python/pyproject.toml").read_text()
)["project"]["version"]
found["bindings/node/package.json"] = json.loads((root / "bindings/node/package.json").read_text())["version"]
lock = json.loads((root / "bindings/node/package-lock.json").read_text())
found["bindings/node/package-lock.json"] = lock["version"]
changelog = (root / "CHANGELOG.md").read_text()
m = re.search(r"^## \[?(\d+\.\d+\.\d+)\]?", changelog, re.M)
found["CHANGELOG.md (newest entry)"] = m.group(1) if m else "<none>"

bad = {k: v for k, v in found.items() if v != version}
for k, v in found.items():
    print(f"{'ok ' if v == version else 'BAD'} {v:>8}  {k}")
if bad:
    sys.exit(f"version mismatch: {', '.join(f'{k} = {v}' for k, v in bad.items())} (expected {version})")
print(f"one version: {version}")
