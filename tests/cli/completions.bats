#!/usr/bin/env bats
# Shell completions: committed files are current, parse in their shell, and complete.
bats_require_minimum_version 1.5.0
load helpers

# Each shell's candidates for the words given, the last being the one completed, one per line.
bash_candidates() {
  bash -c 'source "$1"; shift; COMP_WORDS=("$@"); COMP_CWORD=$(($# - 1)); "_${COMP_WORDS[0]}_complete"
           printf "%s\n" "${COMPREPLY[@]}"' _ "$RKIT_ROOT/completions/bash/$1" "$@"
}
fish_candidates() { fish -c "source $RKIT_ROOT/completions/fish/$1.fish; complete -C '$*'" | cut -f1; }
# zsh's completion system needs a terminal; its builtins are stood in for by functions
# that print what they are given, and the completion function runs on `words`/CURRENT.
zsh_candidates() {
  local t=$1 cur=${*: -1}
  zsh -c '
    _describe() { local -a items; items=("${(@P)${@[-1]}}"); printf "%s\n" "${items[@]%%:*}"; }
    compadd() { [[ $1 == -- ]] && shift; printf "%s\n" "$@"; }
    _files() { :; }
    _message() { :; }
    words=("${@:2}"); CURRENT=$#words; PREFIX=$1
    source "'"$RKIT_ROOT/completions/zsh/_$t"'"' _ "$cur" "$@"
}

@test "committed completions equal what the tools generate (run 'make completions')" {
  for t in $(tools); do
    diff -u "$RKIT_ROOT/completions/bash/$t" <("$t" --print-completion bash)
    diff -u "$RKIT_ROOT/completions/zsh/_$t" <("$t" --print-completion zsh)
    diff -u "$RKIT_ROOT/completions/fish/$t.fish" <("$t" --print-completion fish)
  done
}

@test "completion scripts parse in bash, zsh and fish" {
  for t in $(tools); do
    bash -n "$RKIT_ROOT/completions/bash/$t"
    zsh -n "$RKIT_ROOT/completions/zsh/_$t"
    fish --no-execute "$RKIT_ROOT/completions/fish/$t.fish"
  done
}

@test "bash completes rtop subcommands, options and choices" {
  run bash_candidates rtop ""
  assert_line matrix
  assert_line place
  assert_line sample
  run bash_candidates rtop place --
  assert_line --ranks
  assert_line --policy
  assert_line --json
  refute_line --interval
  run bash_candidates rtop place --policy ""
  assert_output $'pack\nspread'
  run bash_candidates rtop --synthetic ""
  assert_output ""
}

@test "fish completes rtop subcommands and choices" {
  run fish -c "source $RKIT_ROOT/completions/fish/rtop.fish; complete -C 'rtop pl'"
  assert_output --partial place
  run fish -c "source $RKIT_ROOT/completions/fish/rtop.fish; complete -C 'rtop place --policy '"
  assert_line --partial pack
  assert_line --partial spread
}

@test "zsh completion defines the function for compdef" {
  run zsh -c "autoload -U compinit; compinit -u -D; source $RKIT_ROOT/completions/zsh/_rtop 2>/dev/null; whence -w _rtop"
  assert_output "_rtop: function"
}

@test "bash, zsh and fish complete every tool's subcommands and each subcommand's options" {
  for t in $(tools); do
    subs=$(subcommands "$t")
    [ -n "$subs" ]
    for shell in bash zsh fish; do
      got=$("${shell}_candidates" "$t" "")
      for s in $subs; do
        grep -qxF -- "$s" <<<"$got" || { echo "$shell: '$t ' does not offer $s"; return 1; }
      done
      for s in $subs; do
        opts=$(options_of "$t" "$s")
        got=$("${shell}_candidates" "$t" "$s" "--")
        for o in $opts; do
          grep -qxF -- "$o" <<<"$got" || { echo "$shell: '$t $s --' does not offer $o"; return 1; }
        done
      done
    done
  done
}
