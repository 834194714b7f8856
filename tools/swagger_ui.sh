#!/usr/bin/env bash
# Fetches Swagger UI (the npm package swagger-ui-dist) into actors/http/ui/swagger/, the
# files `/docs` serves so that it works offline: the bundle, its stylesheet, its licenses,
# and VERSION. Usage: tools/swagger_ui.sh [VERSION] (default: the one in VERSION; `make
# swagger-ui SWAGGER_UI=x.y.z` updates). Needs npm; run from anywhere.
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
dest="$here/actors/http/ui/swagger"
version="${1:-$(head -n1 "$dest/VERSION")}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
(cd "$work" && npm pack --silent "swagger-ui-dist@$version" >/dev/null && tar xzf swagger-ui-dist-*.tgz)
for name in swagger-ui-bundle.js swagger-ui.css LICENSE NOTICE swagger-ui-bundle.js.LICENSE.txt; do
  cp "$work/package/$name" "$dest/$name"
done
node -e 'const p = require(process.argv[1]);
  console.log(p.version); console.log(`${p.name} ${p.version}, ${p.license}, from the npm registry`)' \
  "$work/package/package.json" > "$dest/VERSION"
echo "swagger-ui-dist $(head -n1 "$dest/VERSION") in $dest"
