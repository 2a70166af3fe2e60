#!/bin/bash
# Pack this machine's espeak-ng (Debian's package) for a machine without it and without a
# network (a lent GPU machine): the program, every library it loads but glibc's, and its data
# with only the English dictionary (the built-in speakers speak English only), behind a wrapper
# that points the program at them. espeak-ng is GPL-3+; this only moves Debian's files.
#   apt-get install espeak-ng && bash benchmarks/device/espeak_bundle.sh .device-cache/espeak-ng.tar.xz
# The corpus it synthesises is byte-identical to the installed program's (checked with a small
# corpus of the same seed). benchmarks/device/recipes.sh unpacks it into /tmp/espeak-bundle.
set -eu
target=${1:?usage: espeak_bundle.sh TARGET.tar.xz}
program=$(command -v espeak-ng)
data=$("$program" --version | sed 's/.*Data at: *//')
work=$(mktemp -d)
bundle=$work/espeak-bundle
mkdir -p "$bundle/bin" "$bundle/lib" "$bundle/libexec" "$bundle/share"
cp "$program" "$bundle/libexec/espeak-ng"
for lib in $(ldd "$program" | awk '/=>/ {print $3}'); do
    case $(basename "$lib") in
        libc.so*|libm.so*|ld-linux*|libpthread.so*|libdl.so*|librt.so*) continue ;;
    esac
    cp -L "$lib" "$bundle/lib/$(basename "$lib")"
done
cp -r "$data" "$bundle/share/espeak-ng-data"
find "$bundle/share/espeak-ng-data" -maxdepth 1 -name '*_dict' ! -name en_dict -delete
cat > "$bundle/bin/espeak-ng" <<'EOF'
#!/bin/sh
# espeak-ng carried with its own libraries (all but glibc's) and data (made by
# benchmarks/device/espeak_bundle.sh).
here=$(cd "$(dirname "$0")/.." && pwd)
LD_LIBRARY_PATH="$here/lib" ESPEAK_DATA_PATH="$here/share" exec "$here/libexec/espeak-ng" "$@"
EOF
chmod +x "$bundle/bin/espeak-ng"
"$bundle/bin/espeak-ng" --version
mkdir -p "$(dirname "$target")"
tar cJf "$target" -C "$work" espeak-bundle
rm -rf "$work"
ls -l "$target"
