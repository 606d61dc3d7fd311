#!/usr/bin/env bash
# Tandem.app signed with a Developer ID and notarized (CI's notarize job, on a
# tag). $1: the zip the macos job uploaded (Tandem.app, ad-hoc signed); it is
# replaced by the notarized app's zip. Without the secrets (a fork) it says so
# and leaves the ad-hoc signed app as it is. Secrets, in the GitHub
# environment "macos-signing" (packaging/README.md, "CI"):
#   MACOS_CERTIFICATE_P12 (base64 of the .p12), MACOS_CERTIFICATE_PASSWORD,
#   MACOS_SIGNING_IDENTITY ("Developer ID Application: Name (TEAMID)"),
#   APPLE_ID, APPLE_TEAM_ID, APPLE_APP_PASSWORD (an app-specific password).
set -euo pipefail
zip=$1
for name in MACOS_CERTIFICATE_P12 MACOS_CERTIFICATE_PASSWORD MACOS_SIGNING_IDENTITY \
            APPLE_ID APPLE_TEAM_ID APPLE_APP_PASSWORD; do
    if [ -z "${!name:-}" ]; then
        echo "No $name: Tandem.app stays ad-hoc signed (Gatekeeper asks on first launch)."
        exit 0
    fi
done
work=$(mktemp -d)
trap 'security delete-keychain "$work/signing.keychain-db" >/dev/null 2>&1 || true; rm -rf "$work"' EXIT
keychain_password=$(uuidgen)
echo "$MACOS_CERTIFICATE_P12" | base64 --decode > "$work/certificate.p12"
security create-keychain -p "$keychain_password" "$work/signing.keychain-db"
security set-keychain-settings -lut 21600 "$work/signing.keychain-db"
security unlock-keychain -p "$keychain_password" "$work/signing.keychain-db"
security import "$work/certificate.p12" -P "$MACOS_CERTIFICATE_PASSWORD" -A -t cert -f pkcs12 \
    -k "$work/signing.keychain-db"
security set-key-partition-list -S apple-tool:,apple: -k "$keychain_password" \
    "$work/signing.keychain-db" >/dev/null
security list-keychains -d user -s "$work/signing.keychain-db"
ditto -x -k "$zip" "$work/app"
app="$work/app/Tandem.app"
codesign --force --deep --options runtime --timestamp -s "$MACOS_SIGNING_IDENTITY" "$app"
codesign --verify --deep --strict "$app"
ditto -c -k --sequesterRsrc --keepParent "$app" "$work/submit.zip"
xcrun notarytool submit "$work/submit.zip" --apple-id "$APPLE_ID" --team-id "$APPLE_TEAM_ID" \
    --password "$APPLE_APP_PASSWORD" --wait
xcrun stapler staple "$app"
ditto -c -k --sequesterRsrc --keepParent "$app" "$zip"
echo "Tandem.app signed with a Developer ID, notarized and stapled."
