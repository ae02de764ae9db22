#!/usr/bin/env python3
"""Write a man page (troff, section 1) from a program's --help output.

    help2man.py PROGRAM OUT.1 SUMMARY [SUBCOMMAND...]

Runs `PROGRAM --help` (and `PROGRAM SUB --help` for each SUBCOMMAND) so the page can
never disagree with the option table that produces the help. Usage lines become the
SYNOPSIS, prose becomes the DESCRIPTION, every "  -x, --long VALUE   text" line an
entry of OPTIONS, and an "exit codes: ..." paragraph (with its indented lines) the EXIT
STATUS.
"""
import os
import re
import subprocess
import sys

OPT = re.compile(r"^\s{1,6}(-\S.*?)\s{2,}(\S.*)$")


def esc(text):
    text = text.replace("\\", "\\e")
    text = re.sub(r"^([.'])", r"\\&\1", text)
    return text.replace("-", "\\-")


def help_of(argv):
    out = subprocess.run(argv + ["--help"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         check=False)
    return out.stdout.decode("utf-8", "replace").splitlines()


def section(lines, title, page):
    usage, prose, opts, status = [], [], [], []
    for line in lines:
        if line.startswith("exit codes:") or (status and line.startswith("  ") and line.strip()):
            status.append(line.replace("exit codes:", "", 1).strip())
            continue
        if line.startswith("usage:") or (usage and not prose and not opts and line.startswith("   ")
                                         and not OPT.match(line)):
            usage.append(line.replace("usage:", "", 1).strip())
            continue
        m = OPT.match(line)
        if m:
            opts.append([m.group(1).strip(), m.group(2).strip()])
        elif opts and line.startswith(" " * 20) and line.strip():
            opts[-1][1] += " " + line.strip()
        elif line.strip().endswith(":") and not line.startswith(" "):
            continue  # "options:" headings
        else:
            prose.append(line.strip())
    if title:
        page.append(".SS " + esc(title))
    if usage:
        if not title:
            page.append(".SH SYNOPSIS")
        for u in usage:
            # "cmd ARGS  # what it does": the command in bold, the comment after a dash
            cmd, _, what = (p.strip() for p in u.partition("  #"))
            page.append(".B " + esc(cmd) if not title else esc(cmd))
            if what:
                page.append("\\(em " + esc(what))
            page.append(".br")
    text = " ".join(p for p in prose if p)
    if text:
        if not title:
            page.append(".SH DESCRIPTION")
        else:
            page.append(".PP")
        page.append(esc(text))
    if opts:
        if not title:
            page.append(".SH OPTIONS")
        for flag, desc in opts:
            page.append(".TP")
            page.append("\\fB" + esc(flag) + "\\fR")
            page.append(esc(desc))
    if status:
        page.append(".SH EXIT STATUS" if not title else ".PP")
        page.append(esc(("" if not title else "Exit codes: ") + " ".join(status)))


def main():
    if len(sys.argv) < 4:
        sys.exit("usage: help2man.py PROGRAM OUT.1 SUMMARY [SUBCOMMAND...]")
    prog, out, summary, subs = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
    name = os.path.basename(prog)
    page = ['.TH %s 1 "" "dslaunch" "User Commands"' % name.upper(), ".SH NAME",
            "%s \\- %s" % (esc(name), esc(summary))]
    section(help_of([prog]), None, page)
    if subs:
        page.append(".SH COMMANDS")
        for sub in subs:
            section(help_of([prog, sub]), "%s %s" % (name, sub), page)
    page += [".SH SEE ALSO", "The documentation installed with dslaunch (share/doc/dslaunch)."]
    with open(out, "w", encoding="utf-8") as f:
        f.write("\n".join(page) + "\n")


if __name__ == "__main__":
    main()
