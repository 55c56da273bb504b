#!/usr/bin/env bash
# The command's end-to-end tests (make test), as two `swift test` processes at once over
# the one debug build: most of these tests wait — on servers, on kill and restart, on
# the Ceph gateway — so two lanes on two cores take
# little more than the longer lane. The second lane holds the suites of the object
# stores (the Ceph cluster, moto), the faults and the rate limits: about half of the
# suite's time in a serial run; each lane's output is printed whole, one after
# the other.
# --ignore-lock: SwiftPM otherwise serialises every command on the build folder, and
# with --skip-build neither lane writes to it.
set -uo pipefail
cd "$(dirname "$0")/.."
SWIFT="${SWIFT:-swift}"
SECOND_LANE='FreshPackageTests|HostileNameTests|CephS3Tests|CephPullTests|ObjectStorageTests|LoadBalancedReceiverTests|StoreFaultTests|S3ObjectRequestsCephTests|TortureTests|S3PushTests|S3UploadsTests|FaultTests|RateLimitTests'

log="$(mktemp -t xfer-e2e-lane.XXXXXX)"
trap 'rm -f "$log"' EXIT
"$SWIFT" test --package-path CLI --skip-build --ignore-lock --filter "$SECOND_LANE" >"$log" 2>&1 &
second=$!
# Even with --skip-build, a starting `swift test` opens the build database, and two opening
# it at once make one fail ("database is locked"): the first lane starts once the second's
# test binary runs (or the lane has ended). Not its log: that is buffered for minutes.
tests="$PWD/CLI/.build/.*xfer-cliPackageTests.xctest"
until pgrep -f "$tests" >/dev/null || ! kill -0 "$second" 2>/dev/null; do sleep 0.2; done
"$SWIFT" test --package-path CLI --skip-build --ignore-lock --skip "$SECOND_LANE"
first_status=$?
wait "$second"
second_status=$?
echo "---- second lane ($SECOND_LANE) ----"
cat "$log"
echo "---- end-to-end: first lane exit $first_status, second lane exit $second_status ----"
[ "$first_status" -eq 0 ] && [ "$second_status" -eq 0 ]
