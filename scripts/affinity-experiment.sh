#!/usr/bin/env bash
# affinity-experiment.sh: compare placement policies on this machine (issue 7).
# Runs cbcmn-run for every workload x policy x executor count x repetition,
# writes OUT/runs.csv (a row per run), OUT/report.md (medians and min-max per
# cell), PNG plots, and with --sysfs-root the PREDICTED cross-node/cross-LLC
# steal traffic on a recorded topology.  docs/EXPERIMENTS.md is the manual.
set -euo pipefail

PROG=affinity-experiment
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# The runtime's own bound (CBCMN_MAX_EXECUTORS in lib/include/cbcmn.h).
MAX_EXECUTORS=1024
COLUMNS_CSV="workload,policy,executors,seed,rep,throughput,throughput_unit,p50_us,p99_us,steals,cross_node_steals,cross_llc_steals,doorbells,contention_ns,migrations,ok"

die() {
	echo "$PROG: $*" >&2
	exit 2
}

usage() {
	cat <<EOF
usage: scripts/$PROG.sh [OPTIONS]
  Runs build/bin/cbcmn-run over a matrix of workloads x policies x executor
  counts x repetitions and writes, into OUT:
    runs.csv      one row per run (failed runs too, with ok=0)
    runs.jsonl    the same rows as JSON, with the failure reason
    report.md     medians and min-max per cell, failures, plots, predictions
    WORKLOAD.png  throughput / p99 / steals against executors, a line per policy
    raw/          every run's JSON output and stderr
    steals/       every run's thief-victim steal matrix (with BPF metrics)
  Exit status: 0 if every run succeeded, 1 if any failed (all are still
  recorded and reported), 2 for bad options or a missing tool.

Matrix (lists are comma-separated):
  -w, --workloads LIST   default fib,skew,pipeline
  -p, --policies LIST    default depth-first,breadth-first,random
      --policy P         add one policy (repeatable), e.g. --policy cpus:0-3,8
  -n, --executors LIST   default: powers of two up to nproc, nproc, and
                         2 x nproc (oversubscribed); here $(default_executors)
  -r, --reps N           repetitions per cell (default 3); rep k uses seed S+k-1
  -d, --duration SEC     seconds per run (default 1)
  -s, --seed S           first seed (default 1)
  -q, --quick            the CI matrix: fib,skew x depth-first,breadth-first
                         x nproc executors x 2 reps x 0.3 s (options given
                         too win)

Other:
  -o, --out DIR          output directory (default build/experiments/affinity-DATE)
      --sysfs-root DIR   also PREDICT steal traffic on this recorded topology
                         (repeatable; tests/fixtures/sysfs/NAME): each run's
                         measured steal pattern mapped through each policy's
                         placement there (needs the BPF metrics); also adds
                         half and all of its allowed CPUs to the default
                         executor counts
      --bpf | --no-bpf   BPF metrics (cbcmn-run --bpf); default: on as root
      --timeout SEC      per-run limit (default 60 + 4 x duration)
      --no-plots         skip gnuplot
      --report-only DIR  run nothing: write DIR/report.md and the plots again
                         from DIR/runs.jsonl (and DIR/meta.json, the matrix
                         and host it was run with); with --no-plots, -v only
      --run PATH         cbcmn-run to use (default build/bin/cbcmn-run)
      --affinity PATH    cbcmn-affinity to use (default build/bin/cbcmn-affinity)
  -v, --verbose          print each command
  -h, --help

EXAMPLES
  scripts/$PROG.sh                                      the default matrix
  scripts/$PROG.sh --quick --out /tmp/exp               under a minute
  scripts/$PROG.sh -w skew -n 4,8 -r 5 --policy cpus:0,2,4,6
  scripts/$PROG.sh -w skew,pipeline --sysfs-root tests/fixtures/sysfs/epyc8n
  scripts/$PROG.sh --report-only build/experiments/affinity-20261122-101500
EOF
}

# Powers of two up to nproc, nproc itself, then 2 x nproc: how policies
# compare as a machine fills, and what oversubscription costs.
default_executors() {
	local c=1 n counts=()
	n=$(nproc)
	while [ "$c" -lt "$n" ]; do
		counts+=("$c")
		c=$((c * 2))
	done
	counts+=("$n")
	if [ $((2 * n)) -le "$MAX_EXECUTORS" ]; then counts+=($((2 * n))); fi
	local IFS=,
	echo "${counts[*]}"
}

# ---- options -------------------------------------------------------------------

workloads='' policies='' executors='' reps='' duration='' seed='' quick=0 out=''
bpf=auto plots=1 timeout_s='' verbose=0 report_only='' matrix_opt=''
extra_policies=() fixtures=()
run_bin=${CBCMN_RUN:-$REPO/build/bin/cbcmn-run}
aff_bin=${CBCMN_AFFINITY:-$REPO/build/bin/cbcmn-affinity}
cmdline="scripts/$PROG.sh${*:+ $*}"

need_arg() {
	[ "$2" -ge 2 ] || die "$1 needs an argument (try --help)"
}
while [ $# -gt 0 ]; do
	case $1 in
	--report-only | --no-plots | -v | --verbose | -h | --help) ;;
	*) matrix_opt=$1 ;; # what --report-only cannot take
	esac
	case $1 in
	-w | --workloads) need_arg "$1" $#; workloads=$2; shift ;;
	-p | --policies) need_arg "$1" $#; policies=$2; shift ;;
	--policy) need_arg "$1" $#; extra_policies+=("$2"); shift ;;
	-n | --executors) need_arg "$1" $#; executors=$2; shift ;;
	-r | --reps) need_arg "$1" $#; reps=$2; shift ;;
	-d | --duration) need_arg "$1" $#; duration=$2; shift ;;
	-s | --seed) need_arg "$1" $#; seed=$2; shift ;;
	-q | --quick) quick=1 ;;
	-o | --out) need_arg "$1" $#; out=$2; shift ;;
	--sysfs-root) need_arg "$1" $#; fixtures+=("$2"); shift ;;
	--bpf) bpf=1 ;;
	--no-bpf) bpf=0 ;;
	--timeout) need_arg "$1" $#; timeout_s=$2; shift ;;
	--no-plots) plots=0 ;;
	--report-only) need_arg "$1" $#; report_only=$2; shift ;;
	--run) need_arg "$1" $#; run_bin=$2; shift ;;
	--affinity) need_arg "$1" $#; aff_bin=$2; shift ;;
	-v | --verbose) verbose=1 ;;
	-h | --help) usage; exit 0 ;;
	*) die "unknown option '$1' (try --help)" ;;
	esac
	shift
done


# One CSV field: quoted only where it must be (a cpus: policy holds commas).
JQ_CSV='def csvf: if . == null then "" elif type == "string" then
		(if test("[\",\n]") then "\"" + gsub("\""; "\"\"") + "\"" else . end)
	else tostring end;'
# A topology in a line, from cbcmn-affinity --json.
JQ_TOPO='"\(.nallowed) allowed CPUs of \(.ncpus), \(.ncores) cores, \(.nodes | length) NUMA node(s), \(.llcs | length) LLC group(s), \(.npackages) package(s)"'
json_array() { printf '%s\n' "$@" | jq -R . | jq -sc .; }

# ---- the matrix, validated ----------------------------------------------------------

setup_matrix() {
	command -v jq >/dev/null || die "needs jq (scripts/install-deps.sh installs it)"
	[ -x "$run_bin" ] || die "$run_bin is not built (run make, or pass --run PATH)"
	[ -x "$aff_bin" ] || die "$aff_bin is not built (run make, or pass --affinity PATH)"

	if [ "$quick" = 1 ]; then
		# 8 runs: cbcmn-run --bpf costs about 3 s a run here (loading and
		# detaching the programs), and CI runs this twice under a minute each.
		: "${workloads:=fib,skew}" "${policies:=depth-first,breadth-first}"
		: "${executors:=$(nproc)}" "${reps:=2}" "${duration:=0.3}"
	fi
	: "${workloads:=fib,skew,pipeline}" "${reps:=3}" "${duration:=1}" "${seed:=1}"
	if [ -z "$policies" ] && [ ${#extra_policies[@]} -eq 0 ]; then
		policies=depth-first,breadth-first,random
	fi

	is_uint() { [[ $1 =~ ^[0-9]+$ ]]; }
	[[ $reps =~ ^[1-9][0-9]*$ ]] || die "--reps wants a positive whole number, got '$reps'"
	if ! [[ $duration =~ ^[0-9]*\.?[0-9]+$ ]] || ! awk "BEGIN { exit !($duration > 0) }"; then
		die "--duration wants a positive number of seconds, got '$duration'"
	fi
	if ! is_uint "$seed" || [ ${#seed} -gt 18 ]; then
		die "--seed wants an unsigned number, got '$seed'"
	fi
	if [ -n "$timeout_s" ]; then
		[[ $timeout_s =~ ^[1-9][0-9]*$ ]] || die "--timeout wants a positive whole number, got '$timeout_s'"
	else
		timeout_s=$(awk "BEGIN { printf \"%d\", 60 + 4 * $duration + 0.999 }")
	fi

	# The lists, split on commas (a policy given with --policy may hold commas).
	IFS=, read -r -a W <<<"$workloads"
	P=()
	[ -n "$policies" ] && IFS=, read -r -a P <<<"$policies"
	P+=(${extra_policies[@]+"${extra_policies[@]}"})
	[ ${#W[@]} -gt 0 ] || die "--workloads is empty"
	# A name given twice is one cell, not two.
	mapfile -t W < <(printf '%s\n' "${W[@]}" | awk '!seen[$0]++')
	mapfile -t P < <(printf '%s\n' "${P[@]}" | awk '!seen[$0]++')

	# Every workload must be one cbcmn-run lists in its --help.
	help_text=$("$run_bin" --help 2>&1) || true
	for w in "${W[@]}"; do
		[[ $w =~ ^[a-z0-9-]+$ ]] || die "bad workload name '$w'"
		grep -qE "(^|[[:space:]])$w([[:space:]:,]|$)" <<<"$help_text" ||
			die "unknown workload '$w' ($run_bin --help lists the workloads)"
	done
	# Every policy must place on this machine; cbcmn-affinity's parser says why not.
	for p in "${P[@]}"; do
		msg=$("$aff_bin" --policy "$p" -n 1 2>&1 >/dev/null) ||
			die "bad policy '$p': ${msg#cbcmn-affinity: }"
	done

	# Fixtures: each must load and take every policy (a cpus: list may name
	# CPUs only this machine has).
	fixture_allowed=() fx_names=() fx_descs=()
	for f in ${fixtures[@]+"${fixtures[@]}"}; do
		[ -d "$f" ] || die "--sysfs-root $f: not a directory"
		for p in "${P[@]}"; do
			msg=$("$aff_bin" --sysfs-root "$f" --policy "$p" -n 1 2>&1 >/dev/null) ||
				die "--sysfs-root $f: ${msg#cbcmn-affinity: }"
		done
		topo=$("$aff_bin" --sysfs-root "$f" --json)
		fixture_allowed+=("$(jq .nallowed <<<"$topo")")
		fx_names+=("$(basename "$f")")
		fx_descs+=("$(jq -r "$JQ_TOPO" <<<"$topo")")
	done

	if [ -z "$executors" ]; then
		executors=$(default_executors)
		for a in ${fixture_allowed[@]+"${fixture_allowed[@]}"}; do
			executors+=",$(((a + 1) / 2)),$a"
		done
	fi
	IFS=, read -r -a E <<<"$executors"
	for e in "${E[@]}"; do
		if ! [[ $e =~ ^[1-9][0-9]*$ ]] || [ "$e" -gt "$MAX_EXECUTORS" ]; then
			die "--executors: '$e' is not a count in 1..$MAX_EXECUTORS"
		fi
	done
	mapfile -t E < <(printf '%s\n' "${E[@]}" | sort -n -u)

	if [ "$bpf" = auto ]; then
		bpf=$([ "$(id -u)" -eq 0 ] && echo 1 || echo 0)
	elif [ "$bpf" = 1 ] && [ "$(id -u)" -ne 0 ]; then
		die "--bpf needs root (the BPF programs are loaded by cbcmn-run)"
	fi
	if [ ${#fixtures[@]} -gt 0 ] && [ "$bpf" = 0 ]; then
		die "--sysfs-root needs the measured steal pattern, which only the BPF metrics give (run as root, without --no-bpf)"
	fi

	[ -n "$out" ] || out=$REPO/build/experiments/affinity-$(date +%Y%m%d-%H%M%S)
	[ ! -e "$out/runs.csv" ] || die "$out already holds runs.csv (pick another --out)"
	mkdir -p "$out/raw" "$out/steals" "$out/plot-data" 2>/dev/null || die "cannot create $out"

	host="$(uname -n), $(uname -r)"
	machine=$("$aff_bin" --json | jq -r "$JQ_TOPO")
	commit=$(git -C "$REPO" rev-parse --short HEAD 2>/dev/null || echo unknown)
	when=$(date -u '+%Y-%m-%d %H:%M UTC')
	elapsed=
}

# ---- running ---------------------------------------------------------------------

child=
on_signal() {
	[ -n "$child" ] && kill -TERM "$child" 2>/dev/null
	echo "$PROG: interrupted; the finished runs are in $out (--report-only $out reports them)" >&2
	exit 130
}

run_matrix() {
	trap on_signal INT TERM

	echo "$COLUMNS_CSV" >"$out/runs.csv"
	: >"$out/runs.jsonl"
	total=$((${#W[@]} * ${#P[@]} * ${#E[@]} * reps))
	k=0 failed=0
	started=$(date +%s)
	# Repetitions outermost, so drift on a noisy host spreads over every cell
	# instead of biasing the cells that ran last.
	for ((rep = 1; rep <= reps; rep++)); do
		s=$((seed + rep - 1))
		for w in "${W[@]}"; do
			for n in "${E[@]}"; do
				for p in "${P[@]}"; do
					k=$((k + 1))
					tag=$(printf '%04d-%s-%s-n%d-r%d' "$k" "$w" "${p//[^A-Za-z0-9-]/_}" "$n" "$rep")
					cmd=("$run_bin" "$w" --workers "$n" --policy "$p" --seed "$s"
						--duration "$duration" --json)
					if [ "$bpf" = 1 ]; then cmd+=(--bpf); fi
					if [ "$verbose" = 1 ]; then echo "+ ${cmd[*]}" >&2; fi
					timeout -k 5 "$timeout_s" "${cmd[@]}" >"$out/raw/$tag.json" \
						2>"$out/raw/$tag.err" </dev/null &
					child=$!
					if wait "$child"; then rc=0; else rc=$?; fi
					child=

					# A run that printed no JSON object still gets its row.  (jq -e
					# alone passes an empty file: 1.6 exits 0 on no input.)
					if ! jq -e -s 'length == 1 and (.[0] | type == "object")' \
						"$out/raw/$tag.json" >/dev/null 2>&1; then
						echo '{}' >"$out/raw/$tag.parsed"
						nojson=1
					else
						jq -c . "$out/raw/$tag.json" >"$out/raw/$tag.parsed"
						nojson=0
					fi
					errline=$(grep -v '^[[:space:]]*$' "$out/raw/$tag.err" | tail -n 1 | cut -c1-200 || true)
					row=$(jq -c --arg w "$w" --arg p "$p" --argjson n "$n" --argjson s "$s" \
						--argjson rep "$rep" --argjson rc "$rc" --argjson nojson "$nojson" \
						--arg err "$errline" --arg to "$timeout_s" --arg raw "raw/$tag" '
						{workload: $w, policy: $p, executors: $n, seed: $s, rep: $rep,
						 throughput, throughput_unit, p50_us, p99_us,
						 steals: (if .bpf then .bpf.steals else .stats.steal_successes end),
						 cross_node_steals: .bpf.cross_node_steals,
						 cross_llc_steals: .bpf.cross_llc_steals,
						 doorbells: (if .bpf then .bpf.doorbells else .stats.doorbells_sent end),
						 contention_ns: .bpf.contention_ns, migrations: .bpf.migrations,
						 ok: ($rc == 0 and .ok == true), raw: $raw,
						 reason: (if $rc == 124 or $rc == 137 then "timed out after \($to) s"
							  elif $rc != 0 then "exit \($rc)" + (if $err != "" then ": " + $err else "" end)
							  elif $nojson == 1 then "output is not one JSON object"
							  elif .ok != true then "reported \"ok\": \(.ok)" + (if $err != "" then ": " + $err else "" end)
							  else null end)}' "$out/raw/$tag.parsed")
					rm -f "$out/raw/$tag.parsed"
					[ -n "$row" ] || die "internal error: no row for $out/raw/$tag"
					echo "$row" >>"$out/runs.jsonl"
					jq -r "$JQ_CSV"'[.workload, .policy, .executors, .seed, .rep, .throughput,
						.throughput_unit, .p50_us, .p99_us, .steals, .cross_node_steals,
						.cross_llc_steals, .doorbells, .contention_ns, .migrations,
						(if .ok then 1 else 0 end)] | map(csvf) | join(",")' <<<"$row" >>"$out/runs.csv"
					if [ "$(jq .ok <<<"$row")" = true ]; then
						jq -r '.bpf.steal_pairs // [] | .[] | "\(.[0]) \(.[1]) \(.[2]) \(.[3] // 0)"' \
							"$out/raw/$tag.json" >"$out/steals/$tag.txt"
						status=$(jq -r '"ok  \(.throughput) \(.throughput_unit // "")"' <<<"$row")
					else
						failed=$((failed + 1))
						status="FAILED: $(jq -r .reason <<<"$row")"
					fi
					printf '[%d/%d] %s %s n=%d rep %d: %s\n' "$k" "$total" "$w" "$p" "$n" "$rep" \
						"$status" >&2
				done
			done
		done
	done
	elapsed=$(($(date +%s) - started))
}

# ---- predictions on recorded topologies --------------------------------------------

# For every successful run and every fixture: the run's steal matrix mapped
# through the placement the run's policy would choose there.
predict_fixtures() {
	if [ ${#fixtures[@]} -gt 0 ]; then
		echo "fixture,workload,policy,executors,seed,rep,steals,same_cpu,same_core,cross_llc,cross_node,cross_package,mean_distance,oversubscribed" \
			>"$out/predictions.csv"
		: >"$out/predictions.jsonl"
		for f in "${fixtures[@]}"; do
			fx=$(basename "$f")
			echo "fixture,policy,executors,seed,shard,cpu,node,llc" >"$out/placements-$fx.csv"
			while IFS= read -r row; do
				tag=$(jq -r '.raw | ltrimstr("raw/")' <<<"$row")
				read -r p n s < <(jq -r '"\(.policy) \(.executors) \(.seed)"' <<<"$row")
				pred=$("$aff_bin" --sysfs-root "$f" -n "$n" --policy "$p" --seed "$s" \
					--steal-matrix "$out/steals/$tag.txt" --json 2>/dev/null) ||
					die "cbcmn-affinity failed on $out/steals/$tag.txt for $f"
				jq -c --arg fx "$fx" --argjson run "$row" '.policies[0] as $q |
					{fixture: $fx, workload: $run.workload, policy: $run.policy,
					 executors: $run.executors, seed: $run.seed, rep: $run.rep, steals,
					 same_cpu: $q.same_cpu, same_core: $q.same_core, cross_llc: $q.cross_llc,
					 cross_node: $q.cross_node, cross_package: $q.cross_package,
					 mean_distance: $q.mean_distance, oversubscribed: $q.oversubscribed,
					 placement: $q.placement}' <<<"$pred" >>"$out/predictions.jsonl"
			done < <(jq -c 'select(.ok)' "$out/runs.jsonl")
			# Placements once per (policy, executors, seed), from any run's answer.
			jq -r --arg fx "$fx" 'select(.fixture == $fx) | . as $r | .placement[] |
				[$fx, $r.policy, $r.executors, $r.seed, .shard, .cpu, .node_id, .llc] |
				map(tostring | if test(",") then "\"" + . + "\"" else . end) | join(",")' \
				"$out/predictions.jsonl" | awk '!seen[$0]++' >>"$out/placements-$fx.csv"
		done
		jq -r "$JQ_CSV"'[.fixture, .workload, .policy, .executors, .seed, .rep, .steals, .same_cpu,
			.same_core, .cross_llc, .cross_node, .cross_package, .mean_distance,
			.oversubscribed] | map(csvf) | join(",")' "$out/predictions.jsonl" >>"$out/predictions.csv"
	fi
}

# ---- meta.json: what --report-only needs to write the report again -------------------

save_meta() {
	jq -n --arg cmdline "$cmdline" --arg host "$host" --arg machine "$machine" \
		--arg commit "$commit" --arg when "$when" --arg elapsed "$elapsed" \
		--argjson W "$(json_array "${W[@]}")" --argjson P "$(json_array "${P[@]}")" \
		--argjson E "$(printf '%s\n' "${E[@]}" | jq -sc .)" --argjson reps "$reps" \
		--arg duration "$duration" --arg seed "$seed" --argjson bpf "$bpf" \
		--argjson fx "$(json_array ${fixtures[@]+"${fixtures[@]}"})" \
		--argjson fxn "$(json_array ${fx_names[@]+"${fx_names[@]}"})" \
		--argjson fxd "$(json_array ${fx_descs[@]+"${fx_descs[@]}"})" '
		{cmdline: $cmdline, host: $host, machine: $machine, commit: $commit, when: $when,
		 elapsed_s: (if $elapsed == "" then null else ($elapsed | tonumber) end),
		 workloads: $W, policies: $P, executors: $E, reps: $reps, duration: $duration,
		 seed: $seed, bpf: ($bpf == 1),
		 fixtures: [range($fx | length) as $i | select($fx[$i] != "") |
			{path: $fx[$i], name: $fxn[$i], topology: $fxd[$i]}]}' >"$out/meta.json.tmp" &&
		mv "$out/meta.json.tmp" "$out/meta.json"
}

# --report-only DIR: the matrix and host from DIR/meta.json; without one (a
# directory from before it existed), what runs.jsonl shows.
load_recorded() {
	out=$1
	[ -z "$matrix_opt" ] || die "--report-only reports the runs in $out as they were: $matrix_opt does not go with it"
	command -v jq >/dev/null || die "needs jq (scripts/install-deps.sh installs it)"
	[ -s "$out/runs.jsonl" ] || die "--report-only $out: no runs.jsonl there"
	jq -e -s 'all(type == "object" and has("workload") and has("ok"))' "$out/runs.jsonl" \
		>/dev/null 2>&1 || die "--report-only $out: runs.jsonl is not this script's"
	# shellcheck disable=SC2016 # jq code: its $x is jq's
	local m=$out/meta.json order='reduce .[] as $x ([]; if any(.[]; . == $x) then . else . + [$x] end) | .[]'
	if [ -f "$m" ]; then
		jq -e 'has("workloads")' "$m" >/dev/null 2>&1 || die "--report-only $out: meta.json is not this script's"
		mapfile -t W < <(jq -r '.workloads[]' "$m")
		mapfile -t P < <(jq -r '.policies[]' "$m")
		mapfile -t E < <(jq -r '.executors[]' "$m")
		mapfile -t fixtures < <(jq -r '.fixtures[].path' "$m")
		mapfile -t fx_names < <(jq -r '.fixtures[].name' "$m")
		mapfile -t fx_descs < <(jq -r '.fixtures[].topology' "$m")
		{ read -r reps; read -r duration; read -r seed; read -r bpf; read -r elapsed
		  read -r commit; read -r when; read -r host; read -r machine; read -r cmdline; } < <(jq -r '
			.reps, .duration, .seed, (if .bpf then 1 else 0 end), (.elapsed_s // ""),
			.commit, .when, .host, .machine, .cmdline' "$m")
	else
		mapfile -t W < <(jq -r -s "map(.workload) | $order" "$out/runs.jsonl")
		mapfile -t P < <(jq -r -s "map(.policy) | $order" "$out/runs.jsonl")
		mapfile -t E < <(jq -r '.executors' "$out/runs.jsonl" | sort -n -u)
		fixtures=() fx_names=() fx_descs=()
		{ read -r reps; read -r seed; read -r bpf; } < <(jq -r -s '(map(.rep) | max),
			(map(.seed) | min), (if any(.[]; .cross_node_steals != null) then 1 else 0 end)' \
			"$out/runs.jsonl")
		duration='?' elapsed='' commit='not recorded' when='date not recorded'
		host='not recorded (no meta.json)' machine='' cmdline='not recorded'
	fi
	total=$(jq -s length "$out/runs.jsonl")
	failed=$(jq -s 'map(select(.ok | not)) | length' "$out/runs.jsonl")
	mkdir -p "$out/plot-data" 2>/dev/null || die "cannot write to $out"
}

# ---- main ---------------------------------------------------------------------------

if [ -n "$report_only" ]; then
	load_recorded "$report_only"
else
	setup_matrix
	save_meta
	run_matrix
	predict_fixtures
	save_meta # now with the time it took
fi
WJ=$(json_array "${W[@]}")
PJ=$(json_array "${P[@]}")
EJ=$(printf '%s\n' "${E[@]}" | jq -sc .)

# ---- report ------------------------------------------------------------------------

# shellcheck disable=SC2016 # jq code: its $names are jq's
# Numbers for people: 3 significant-ish digits, "–" for none.
JQ_LIB='
def med: sort | if length == 0 then null elif length % 2 == 1 then .[(length - 1) / 2]
	else (.[length / 2 - 1] + .[length / 2]) / 2 end;
def num: if . == null then "–"
	elif (if . < 0 then -. else . end) >= 100 then (round | tostring)
	elif (if . < 0 then -. else . end) >= 10 then (. * 10 | round / 10 | tostring)
	else (. * 100 | round / 100 | tostring) end;
def spread(f): [.[] | f | select(. != null)] as $v |
	if ($v | length) == 0 then "–"
	elif ($v | length) == 1 then ($v[0] | num)
	else "\($v | med | num) (\($v | min | num)–\($v | max | num))" end;
def medof(f): [.[] | f | select(. != null)] | med;
def pctof(a; b): if a == null or b == null or b == 0 then "–" else "\(100 * a / b | num) %" end;
def cells($runs): $W[] as $w | $E[] as $e | $P[] as $p |
	[$runs[] | select(.workload == $w and .executors == $e and .policy == $p)] |
	select(length > 0) | {w: $w, e: $e, p: $p, all: ., ok: map(select(.ok))};
'

runs_note="$total runs${elapsed:+ in $elapsed s}"
if [ -n "$report_only" ]; then
	runs_note+="; report written again $(date -u '+%Y-%m-%d %H:%M UTC') (--report-only)"
fi
{
	echo "# Affinity-policy experiment"
	echo
	echo "- Host: $host${machine:+; $machine}"
	echo "- Commit: $commit; $when; $runs_note"
	echo "- Command: \`$cmdline\`"
	echo "- Matrix: workloads ${W[*]}; policies ${P[*]}; executors ${E[*]}; $reps rep(s) of $duration s, seeds $seed..$((seed + reps - 1))"
	echo "- BPF metrics: $([ "$bpf" = 1 ] && echo "on (cbcmn-run --bpf)" || echo "off: steals and doorbells from the runtime's stats; cross-node, cross-LLC, contention and migrations empty")"
	echo "- Failed runs: $failed of $total"
	echo
	echo "## Measured (on the host above)"
	echo
	echo "Median over the successful repetitions, (min–max) when there are two or more."
	echo "ok = successful runs / runs.  Latency in µs; contention in ns of lock waits."
	echo
	echo "| workload | policy | executors | ok | throughput | unit | p50 µs | p99 µs | steals | cross-node steals | cross-LLC steals | doorbells | contention ns | migrations |"
	echo "|---|---|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|"
	jq -nr --argjson W "$WJ" --argjson P "$PJ" --argjson E "$EJ" "$JQ_LIB"'
		[inputs] as $runs | cells($runs) |
		"| \(.w) | \(.p | gsub("\\|"; "\\|")) | \(.e) | \(.ok | length)/\(.all | length) | " +
		(.ok | [spread(.throughput), ((map(.throughput_unit | select(. != null)) | unique | join(" ")) // "–"),
			spread(.p50_us), spread(.p99_us), spread(.steals), spread(.cross_node_steals),
			spread(.cross_llc_steals), spread(.doorbells), spread(.contention_ns),
			spread(.migrations)] | join(" | ")) + " |"' "$out/runs.jsonl"
	echo
	if [ "$failed" -gt 0 ]; then
		echo "## Failed runs"
		echo
		echo "| workload | policy | executors | seed | rep | reason | output |"
		echo "|---|---|---:|---:|---:|---|---|"
		jq -r 'select(.ok | not) | "| \(.workload) | \(.policy) | \(.executors) | \(.seed) | \(.rep) | \(.reason | gsub("\\|"; "\\|")) | `\(.raw).json`, `\(.raw).err` |"' \
			"$out/runs.jsonl"
		echo
	fi
} >"$out/report.md"

# ---- plots ---------------------------------------------------------------------------

plot_note=
if [ "$plots" = 0 ]; then
	plot_note="Plots skipped (--no-plots)."
elif ! command -v gnuplot >/dev/null; then
	plot_note="No plots: gnuplot is not installed (scripts/install-deps.sh installs gnuplot-nox)."
	echo "$PROG: warning: $plot_note" >&2
else
	term=png
	gnuplot -e 'set terminal pngcairo' >/dev/null 2>&1 && term="pngcairo"
	metrics=(throughput p99_us steals cross_node_steals)
	titles=("throughput" "p99 latency (µs)" "steals" "cross-node steals")
	xtics=$(printf '%s,' "${E[@]}")
	for w in "${W[@]}"; do
		panels=()
		for i in "${!metrics[@]}"; do
			m=${metrics[$i]}
			clauses=()
			for j in "${!P[@]}"; do
				dat="$out/plot-data/$w-$m-$j.dat"
				# executors, median, min, max over the successful runs of the cell
				jq -nr --arg w "$w" --arg p "${P[$j]}" --arg m "$m" --argjson W "$WJ" \
					--argjson P "$PJ" --argjson E "$EJ" "$JQ_LIB"'
					[inputs | select(.ok and .workload == $w and .policy == $p)] as $r |
					$E[] as $e | [$r[] | select(.executors == $e) | .[$m] | select(. != null)] |
					select(length > 0) | "\($e) \(med) \(min) \(max)"' "$out/runs.jsonl" >"$dat"
				# a metric that is 0 everywhere (a workload without latencies)
				# makes an empty panel: left out like a missing one
				if awk '$4 != 0 { found = 1 } END { exit !found }' "$dat"; then
					clauses+=("'$dat' using 1:2:3:4 with yerrorlines title '${P[$j]//\'/}'")
				fi
			done
			if [ ${#clauses[@]} -gt 0 ]; then
				joined=$(printf '%s, ' "${clauses[@]}")
				panels+=("set title '${titles[$i]}'; plot ${joined%, }")
			fi
		done
		[ ${#panels[@]} -gt 0 ] || continue
		unit=$(jq -nr --arg w "$w" 'first(inputs | select(.ok and .workload == $w) |
			.throughput_unit // empty) // ""' "$out/runs.jsonl")
		{
			echo "set terminal $term size $((420 * ${#panels[@]})),420"
			echo "set output '$out/$w.png'"
			echo "set multiplot layout 1,${#panels[@]} title '$w against executors: median and min-max per cell (throughput in $unit)'"
			echo "set logscale x 2; set xtics (${xtics%,}); set xrange [0.8:$((E[${#E[@]} - 1] * 5 / 4 + 1))]"
			echo "set key below horizontal; set grid; set yrange [0:*]"
			echo "set format y '%.1s%c'"
			printf '%s\n' "${panels[@]}"
			echo "unset multiplot"
		} >"$out/plot-data/$w.gp"
		gnuplot "$out/plot-data/$w.gp" 2>>"$out/plot-data/gnuplot.log" ||
			die "gnuplot failed on $out/plot-data/$w.gp (see $out/plot-data/gnuplot.log)"
	done
fi
{
	echo "## Plots"
	echo
	if [ -n "$plot_note" ]; then
		echo "$plot_note"
	else
		echo "Per workload: throughput, p99 latency, steals and cross-node steals (panels"
		echo "without data, or all 0, are left out) against executors (log scale), a line"
		echo "per policy, median with min–max bars."
		echo
		for w in "${W[@]}"; do
			if [ -f "$out/$w.png" ]; then echo "![$w]($w.png)"; fi
		done
	fi
	echo
} >>"$out/report.md"

# ---- predictions in the report --------------------------------------------------------

if [ ${#fixtures[@]} -gt 0 ] && [ -s "$out/predictions.jsonl" ]; then
	for i in "${!fixtures[@]}"; do
		f=${fixtures[$i]} fx=${fx_names[$i]} fxdesc=${fx_descs[$i]}
		{
			echo "## PREDICTION for \`$fx\` (not measured)"
			echo
			echo "\`$f\`: $fxdesc.  Each successful run's steal pattern measured HERE"
			echo "(thief → victim counts from the BPF metrics, \`steals/\`) is mapped through the"
			echo "placement the run's policy would choose on \`$fx\` for the same executor count"
			echo "and seed (\`cbcmn-affinity --steal-matrix\`).  This predicts where the steals of"
			echo "that pattern would land, not how the runtime would behave there: its victim"
			echo "choice prefers nearby shards on a multi-node machine, which this single-node"
			echo "pattern cannot show, and timing and contention would differ (docs/EXPERIMENTS.md)."
			echo
			echo "| workload | policy | executors | steals (measured here) | predicted cross-LLC | % | predicted cross-node | % | mean node distance | oversubscribed |"
			echo "|---|---|---:|---:|---:|---:|---:|---:|---:|---|"
			jq -nr --arg fx "$fx" --argjson W "$WJ" --argjson P "$PJ" --argjson E "$EJ" "$JQ_LIB"'
				[inputs | select(.fixture == $fx)] as $runs | cells($runs) | .all as $c |
				"| \(.w) | \(.p | gsub("\\|"; "\\|")) | \(.e) | \($c | spread(.steals)) | " +
				"\($c | spread(.cross_llc)) | \(pctof($c | medof(.cross_llc); $c | medof(.steals))) | " +
				"\($c | spread(.cross_node)) | \(pctof($c | medof(.cross_node); $c | medof(.steals))) | " +
				"\($c | spread(.mean_distance)) | \(if any($c[]; .oversubscribed) then "yes" else "no" end) |"' \
				"$out/predictions.jsonl"
			echo
			echo "Placement on \`$fx\` (shard:CPU/node/LLC, node as the kernel numbers it; the"
			echo "first seed's; every shard and seed in \`placements-$fx.csv\`):"
			echo
			jq -nr --arg fx "$fx" --argjson P "$PJ" --argjson E "$EJ" '
				[inputs | select(.fixture == $fx)] as $r | $E[] as $e | $P[] as $p |
				[$r[] | select(.executors == $e and .policy == $p)] | select(length > 0) |
				min_by(.seed) | .placement as $pl |
				"- \($p) × \($e): " + ([$pl[:32][] | "\(.shard):\(.cpu)/n\(.node_id)/l\(.llc)"] | join(" ")) +
				(if ($pl | length) > 32 then " … (\($pl | length) shards)" else "" end)' \
				"$out/predictions.jsonl"
			echo
		} >>"$out/report.md"
	done
fi

echo "$PROG: $total runs, $failed failed; $out/report.md" >&2
[ -n "$report_only" ] || [ "$failed" -eq 0 ] || exit 1
