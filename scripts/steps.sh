# Timed steps, for scripts/test.sh (sourced after `set -euo pipefail`).
#
#   step NAME CMD...      runs CMD in the foreground; a failure ends the
#                         script (set -e), as a plain command would
#   bg_step [--no-nice] NAME CMD...
#                         starts CMD (a program, not a function) in the
#                         background: niced (unless --no-nice), so that the
#                         tests in the foreground come first, in a process
#                         group of its own, its output into a log
#   bg_wait NAME [quiet]  waits for it, shows its output (quiet: only when it
#                         failed) and fails the script when it failed
#   bg_status NAME        the file that appears when NAME has finished,
#                         holding its exit code (test/release's test
#                         waits for goreleaser's this way)
#
# Each step prints `>> step NAME took S s, C CPU-s` to stderr when it ends
# (C: the CPU time of the step and all it started and waited for). On exit,
# whatever the cause, the trap that steps_init sets stops the background
# steps still running (their whole process group), shows the log of any that
# failed, and prints every step's time and the total.

_steps_names=()
_steps_times=()
_steps_current=""
_steps_cpu_total=0
_steps_current_start=0
declare -A _bg_pid=() _bg_start=()

# _steps_now prints the time in microseconds.
_steps_now() {
  if [ -n "${EPOCHREALTIME:-}" ]; then
    echo "${EPOCHREALTIME//[!0-9]/}"
  else
    echo "$(($(date +%s) * 1000000))"
  fi
}

# _steps_secs US prints US microseconds as seconds, to a tenth.
_steps_secs() {
  printf '%d.%d' "$(($1 / 1000000))" "$(($1 / 100000 % 10))"
}

# _steps_us TIMES... prints the sum of times as the builtin times writes
# them (1m2.345s) in microseconds.
_steps_us() {
  local total=0 t m sec
  for t in "$@"; do
    t="${t%s}"
    m="${t%%m*}" sec="${t#*m}"
    sec="${sec/./}"
    total=$((total + 10#$m * 60000000 + 10#$sec * 1000))
  done
  echo "$total"
}

# _steps_cpu_of FILE prints the CPU time (user + system) that FILE, the
# output of the builtin times, gives the children, in microseconds.
_steps_cpu_of() {
  # shellcheck disable=SC2046 # the second line's two fields
  [ -s "$1" ] && _steps_us $(tail -n 1 "$1")
}

# _steps_record NAME START END CPU [NOTE] prints a step's timing line and
# keeps it for the summary; CPU is its CPU time in microseconds, or empty.
_steps_record() {
  local secs cpu=""
  secs="$(_steps_secs "$(($3 - $2))")"
  if [ -n "$4" ]; then
    cpu="$(_steps_secs "$4")"
    _steps_cpu_total=$((_steps_cpu_total + $4))
  fi
  echo ">> step $1 took $secs s${cpu:+, $cpu CPU-s}${5:+ ($5)}" >&2
  _steps_names+=("$1")
  _steps_times+=("$(printf '%8s s %10s%s' "$secs" "${cpu:+$cpu CPU-s}" "${5:+  $5}")")
}

steps_init() {
  _steps_start="$(_steps_now)"
  _steps_dir="$(mktemp -d -t leasectl-steps-XXXXXX)"
  trap _steps_exit EXIT
  trap 'exit 130' INT
  trap 'exit 143' TERM
}

step() {
  local name="$1"
  shift
  _steps_current="$name" _steps_current_start="$(_steps_now)"
  # In a subshell, whose times are of this step's processes alone (the
  # background steps are this shell's children).
  rm -f "$_steps_dir/step.times"
  (
    trap 'times >"$_steps_dir/step.times"' EXIT
    "$@"
  )
  _steps_record "$name" "$_steps_current_start" "$(_steps_now)" "$(_steps_cpu_of "$_steps_dir/step.times")"
  _steps_current=""
}

bg_status() { echo "$_steps_dir/$1.status"; }

bg_step() {
  local niced=1
  if [ "$1" = --no-nice ]; then
    niced=""
    shift
  fi
  local name="$1"
  shift
  local status
  status="$(bg_status "$name")"
  local run=()
  command -v setsid >/dev/null 2>&1 && run+=(setsid)
  [ -n "$niced" ] && command -v nice >/dev/null 2>&1 && run+=(nice -n 10)
  # The status file (exit code, end time, the CPU time of what the step
  # ran) is written whole, then renamed.
  "${run[@]}" bash -c '"${@:2}"; rc=$?
    times >"$1.times"
    echo "$rc ${EPOCHREALTIME//[!0-9]/}" >"$1.tmp" && mv "$1.tmp" "$1"
    exit "$rc"' bash "$status" "$@" >"$_steps_dir/$name.log" 2>&1 </dev/null &
  _bg_pid[$name]=$!
  _bg_start[$name]="$(_steps_now)"
  echo ">> step $name started in the background" >&2
}

# _bg_finished NAME [NOTE]: NAME has ended; record its time (from the end
# its status file gives) and return its exit code.
_bg_finished() {
  local name="$1" rc=0 end cpu=""
  wait "${_bg_pid[$name]}" 2>/dev/null || rc=$?
  unset "_bg_pid[$name]"
  end="$(_steps_now)"
  if [ -f "$(bg_status "$name")" ]; then
    read -r rc end <"$(bg_status "$name")"
    [ -n "$end" ] || end="$(_steps_now)"
    cpu="$(_steps_cpu_of "$(bg_status "$name").times")"
  fi
  local note="background"
  [ "$rc" -eq 0 ] || note="background, FAILED with exit $rc"
  _steps_record "$name" "${_bg_start[$name]}" "$end" "$cpu" "$note"
  return "$rc"
}

bg_wait() {
  local name="$1" quiet="${2:-}" rc=0
  _bg_finished "$name" || rc=$?
  if [ "$rc" -ne 0 ]; then
    echo ">> step $name failed (exit $rc); its output:" >&2
    cat "$_steps_dir/$name.log"
    exit "$rc"
  fi
  [ "$quiet" = quiet ] || cat "$_steps_dir/$name.log"
}

_steps_exit() {
  local rc=$? name
  # A second Ctrl-C must not cut the clean-up short.
  trap '' INT TERM
  set +e
  if [ -n "$_steps_current" ]; then
    _steps_record "$_steps_current" "$_steps_current_start" "$(_steps_now)" "$(_steps_cpu_of "$_steps_dir/step.times")" "FAILED with exit $rc"
  fi
  for name in "${!_bg_pid[@]}"; do
    if [ -f "$(bg_status "$name")" ]; then
      if ! _bg_finished "$name"; then
        echo ">> step $name failed; its output:" >&2
        cat "$_steps_dir/$name.log" >&2
      fi
    else
      # Still running: stop it and all it started (it leads its own group).
      kill -TERM -- "-${_bg_pid[$name]}" 2>/dev/null || kill -TERM "${_bg_pid[$name]}" 2>/dev/null
      wait "${_bg_pid[$name]}" 2>/dev/null
      _steps_record "$name" "${_bg_start[$name]}" "$(_steps_now)" "" "background, stopped unfinished"
      unset "_bg_pid[$name]"
    fi
  done
  {
    echo ">> steps (wall-clock seconds and CPU seconds; background steps overlap the others):"
    local i
    for i in "${!_steps_names[@]}"; do
      printf '>>   %-12s %s\n' "${_steps_names[$i]}" "${_steps_times[$i]}"
    done
    printf '>>   %-12s %8s s %10s%s\n' total "$(_steps_secs "$(($(_steps_now) - _steps_start))")" "$(_steps_secs "$_steps_cpu_total") CPU-s" "$([ "$rc" -eq 0 ] || echo "  FAILED with exit $rc")"
  } >&2
  rm -rf "$_steps_dir"
  exit "$rc"
}
