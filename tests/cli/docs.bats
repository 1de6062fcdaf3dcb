#!/usr/bin/env bats
# --help, the man page and the completions agree: a flag missing from one fails here.
bats_require_minimum_version 1.5.0
load helpers

# Long options that `tool [sub [subsub]] --help` lists, for the tool, each subcommand
# and each of theirs (rtrain runs ls, rckpt model register).
help_options() {
  local t=$1 sub subsub
  { options_of "$t"
    for sub in $(subcommands "$t"); do
      options_of "$t" "$sub"
      for subsub in $(subcommands "$t" "$sub"); do options_of "$t" "$sub" "$subsub"; done
    done; } | sort -u
}

# The man page source with roff's escaped hyphens (\-) made plain.
man_text() { sed 's/\\-/-/g' "$RKIT_ROOT/man/$1.1"; }

@test "every tool has a man page, completions and rkit(7)" {
  assert_file_exist "$RKIT_ROOT/man/rkit.7"
  for t in $(tools); do
    assert_file_exist "$RKIT_ROOT/man/$t.1"
    assert_file_exist "$RKIT_ROOT/completions/bash/$t"
    assert_file_exist "$RKIT_ROOT/completions/zsh/_$t"
    assert_file_exist "$RKIT_ROOT/completions/fish/$t.fish"
  done
}

@test "every option in --help is in the man page and in each completion" {
  for t in $(tools); do
    opts=$(help_options "$t")
    [ -n "$opts" ]
    for o in $opts; do
      man_text "$t" | grep -qE -- "(^|[^a-z0-9-])$o([^a-z0-9-]|\$)" || { echo "$t: $o missing from man/$t.1"; return 1; }
      grep -qwF -- "$o" "$RKIT_ROOT/completions/bash/$t" || { echo "$t: $o missing from bash completion"; return 1; }
      grep -qF -- "'$o:" "$RKIT_ROOT/completions/zsh/_$t" || { echo "$t: $o missing from zsh completion"; return 1; }
      grep -qE -- "-l ${o#--}( |$)" "$RKIT_ROOT/completions/fish/$t.fish" || { echo "$t: $o missing from fish completion"; return 1; }
    done
  done
}

@test "every option the man page documents exists in --help" {
  for t in $(tools); do
    opts=$(help_options "$t")
    # Options the page documents: those on its macro lines (.B, .BR, .BI, .IP, .TP).
    documented=$(man_text "$t" | grep -E '^\.(B|BI|BR|IP|TP)( |$)' | grep -oE -- '--[a-z][a-z0-9-]*' | sort -u)
    [ -n "$documented" ]
    for o in $documented; do
      grep -qxF -- "$o" <<<"$opts" || { echo "$t: man page documents $o, which --help does not list"; return 1; }
    done
  done
}

@test "every subcommand in --help has a section in the man page" {
  for t in $(tools); do
    for sub in $(subcommands "$t"); do
      grep -qE "^\.(SS|TP|B).*\b$sub\b|^\.B $sub|^\\\\fB$sub" "$RKIT_ROOT/man/$t.1" || { echo "$t: subcommand $sub not in man page"; return 1; }
    done
  done
}

@test "man pages render without warnings" {
  for f in "$RKIT_ROOT"/man/*.[17]; do
    run groff -man -Tutf8 -ww -z "$f"
    assert_success
    assert_output ""
  done
}

@test "every man page has the sections a reader looks for" {
  for t in $(tools); do
    for section in NAME SYNOPSIS DESCRIPTION OPTIONS OUTPUT "EXIT STATUS" EXAMPLES "SEE ALSO"; do
      grep -qxF ".SH $section" "$RKIT_ROOT/man/$t.1" || { echo "$t: man page has no $section section"; return 1; }
    done
    # EXIT STATUS names the codes: at least 0 and the usage error, 64.
    sed -n '/^\.SH EXIT STATUS/,/^\.SH /p' "$RKIT_ROOT/man/$t.1" | grep -qE '^\.B 64|^64' ||
      { echo "$t: EXIT STATUS does not list 64"; return 1; }
  done
}

@test "each man page names every record schema its tool prints or reads" {
  for t in $(tools); do
    for schema in $(grep -rhoE '"rkit\.[a-z_.]+\.v[0-9]+"' "$RKIT_ROOT/tools/$t" | tr -d '"' | sort -u); do
      grep -qF "$schema" "$RKIT_ROOT/man/$t.1" || { echo "$t: man page does not name $schema"; return 1; }
    done
  done
}
