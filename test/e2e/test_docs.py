"""The documentation a user reaches: `man NAME` finds a page documenting
every public call after `make install` (a `.so` link is followed as man
follows it), the README stays a front door (its first screen gives exactly
the two set-up commands, it is at most 200 lines) and every relative link in
the README, docs/ and the folders' READMEs leads to a file that exists."""
import re
import subprocess

from conftest import BUILD, ROOT

HEADERS = [ROOT / "include" / "loopfast.h", *sorted((ROOT / "include" / "loopfast").glob("*.h"))]


def declared_calls():
    """Every function the public headers declare: comments and preprocessor
    lines dropped, then each `lf_name(`."""
    names = set()
    for h in HEADERS:
        text = re.sub(r"/\*.*?\*/", "", h.read_text(), flags=re.S)
        text = "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("#"))
        names |= set(re.findall(r"\b(lf_\w+)\s*\(", text))
    return names


def exported_calls(libdir):
    out = set()
    for lib in libdir.glob("libloopfast*.so.0"):
        nm = subprocess.run(["nm", "-D", "--defined-only", str(lib)], capture_output=True, text=True, check=True)
        out |= {line.split()[-1] for line in nm.stdout.splitlines() if line.split()[-1].startswith("lf_")}
    return out


def section(page, name):
    m = re.search(rf"^\.SH {name}\n(.*?)(?=^\.SH |\Z)", page, re.M | re.S)
    return m.group(1) if m else ""


def man_page(mandir, name):
    """What `man 3 NAME` shows from mandir: the page's source, with `.so`
    links followed (relative to mandir, as man resolves them)."""
    path = mandir / "man3" / f"{name}.3"
    for _ in range(4):
        assert path.exists(), f"man {name} finds nothing: no {path.relative_to(mandir.parent.parent)}"
        text = path.read_text()
        m = re.fullmatch(r"\.so (\S+)\n?", text)
        if not m:
            return text
        path = mandir / m.group(1)
    raise AssertionError(f"man {name}: .so links loop")


def test_every_public_call_has_an_installed_man_page(build, tmp_path):
    prefix = tmp_path / "prefix"
    p = subprocess.run(["cmake", "--install", str(BUILD), "--prefix", str(prefix)], capture_output=True, text=True)
    assert p.returncode == 0, p.stdout + p.stderr
    calls = declared_calls()
    assert {"lf_enable_fast_path", "lf_strerror", "lf_rio_open", "lf_rio_dequeue"} <= calls, calls
    # The header parse misses nothing the installed libraries export.
    libdir = next(prefix.rglob("libloopfast.so.0")).parent
    assert exported_calls(libdir) == calls, "declared and exported lf_* calls differ"
    mandir = prefix / "share" / "man"
    for name in sorted(calls):
        page = man_page(mandir, name)
        assert re.search(rf"\b{name}\b", section(page, "NAME")), f"man {name}: its page's NAME does not list it"
        assert re.search(rf"\b{name}\(", section(page, "SYNOPSIS")), f"man {name}: its page's SYNOPSIS does not declare it"
    for page in ("man1/loopfast.1", "man7/loopfast.7", "man3/loopfast.3", "man3/lf_rio.3"):
        assert (mandir / page).exists(), page


def test_readme_first_screen_and_length():
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= 200, "README.md is over 200 lines"
    first_block = re.search(r"^```\n(.*?)^```", readme, re.M | re.S).group(1)
    commands = [line.split("#")[0].strip() for line in first_block.splitlines() if line.strip()]
    assert commands == ["make demo", "make test"], commands
    # The behaviour list has one home, loopfast(7), which the README links.
    assert "](man/loopfast.7)" in readme
    assert "Where it differs from TCP" not in readme


def test_relative_links_lead_somewhere():
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")),
             *sorted(p for p in ROOT.glob("*/**/README.md")
                     if not any(d.startswith((".", "build")) for d in p.relative_to(ROOT).parts))]
    broken = []
    for page in pages:
        for target in re.findall(r"\]\(([^)\s]+)\)", page.read_text()):
            if re.match(r"[a-z]+:", target) or target.startswith("#"):
                continue
            if not (page.parent / target.split("#")[0]).exists():
                broken.append(f"{page.relative_to(ROOT)}: {target}")
    assert not broken, broken


def test_every_man_page_names_itself_for_whatis():
    """man's index (whatis, apropos; lintian's bad-whatis-entry) reads a
    page's NAME section as "NAME[, NAME...] \\- description", each NAME a
    single word: `loopfast bench stream \\- ...` is not found."""
    bad = []
    for page in sorted((ROOT / "man").glob("*.[137]")):
        lines = page.read_text().splitlines()
        if lines and lines[0].startswith(".so "):
            continue  # a link to the page that documents it
        i = lines.index(".SH NAME") + 1 if ".SH NAME" in lines else len(lines)
        j = next((k for k in range(i, len(lines)) if lines[k].startswith(".SH")), len(lines))
        section = " ".join(lines[i:j])
        names = section.split(" \\- ")[0].split(",") if " \\- " in section else []
        if not names or any(len(n.split()) != 1 for n in names):
            bad.append(f"{page.name}: {section[:80]!r}")
    assert not bad, bad
