"""Kernel-name knowledge lives only in rules/: no Python string spells a kernel, op, category, link, engine or dtype
name that a rule file holds; the roles of rules/roles.toml are one typed, validated, picklable value of the pack;
the one dtype table sizes every Kineto dtype; and lccl/lcoc kernels are communication for the breakdown and the
collectives alike (rule ASC-COMM-002 and role comm_ops are one pattern)."""

from __future__ import annotations

import ast
import gzip
import pickle
import re
import warnings
from pathlib import Path
from re import _constants as sre_c
from re import _parser as sre_parse

import polars as pl
import pytest
import tomllib
from conftest import FIXTURES, ROOT

from profan.model.errors import ProfanInputError
from profan.rulepack.classify import classify
from profan.rulepack.pack import load
from profan.rulepack.roles import BUILTIN_ONLY, Roles
from profan.rulepack.roles import defaults as default_roles

RULES = ROOT / "rules"

# ------------------------------------------------------------------------------- the words the rule files hold

_LIMIT = 512  # alternatives expanded per word (aten::(mm|bmm|…) -> aten::mm, aten::bmm, …)
_REPEATS = (sre_c.MAX_REPEAT, sre_c.MIN_REPEAT, sre_c.POSSESSIVE_REPEAT)


def _finite(items) -> set[str] | None:
    """The strings a regex part matches when it is literals and alternations only, else None."""
    out = {""}
    for op, av in items:
        if op is sre_c.AT:
            continue
        if op is sre_c.LITERAL:
            out = {o + chr(av) for o in out}
        elif op is sre_c.SUBPATTERN or op is sre_c.BRANCH:
            alts: set[str] = set()
            for part in [av[-1]] if op is sre_c.SUBPATTERN else av[1]:
                x = _finite(part)
                if x is None:
                    return None
                alts |= x
            out = {o + a for o in out for a in alts}
        else:
            return None
        if len(out) > _LIMIT:
            return None
    return out


def _spell(items, words: set[str]) -> None:
    cur = {""}
    for op, av in items:
        if op is sre_c.AT:
            continue
        x = _finite([(op, av)])
        if x is not None and len(cur) * len(x) <= _LIMIT:
            cur = {c + a for c in cur for a in x}
            continue
        words.update(w for w in cur if w)  # a class, wildcard or repeat ends a word
        cur = {""}
        inner = (
            [av[-1]] if op is sre_c.SUBPATTERN else av[1] if op is sre_c.BRANCH else [av[2]] if op in _REPEATS else []
        )
        for part in inner:
            _spell(part, words)
    words.update(w for w in cur if w)


def regex_words(pattern: str) -> tuple[set[str], bool]:
    """(the literal words a regex spells, whether it ignores case): maximal runs of literal text with alternations
    expanded — ``(?i)^(hcom_|lccl)`` -> hcom_, lccl; ``^aten::(mm|cat)$`` -> aten::mm, aten::cat. Text that is no
    regex is one word."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            tree = sre_parse.parse(pattern)
        except (re.error, RecursionError, OverflowError):
            return {pattern}, False
    words: set[str] = set()
    _spell(tree, words)
    return words, bool(tree.state.flags & re.IGNORECASE)


def _distinct(word: str) -> bool:
    return len(word.strip()) >= 3 and re.search(r"[A-Za-z]", word) is not None


# Roles whose plain words are also other things' names: dtypes Float / Half, which Python and polars spell for their
# own types; the HCCL process Communication of trace_view.json, which is also an Overlap Analysis lane, a
# step_trace_time.csv column and a report's section title. Their other names (BFloat16, HCCL) count.
_NAMES_NO_PLAIN_WORDS = ("dtype_bytes", "ascend_comm_processes")


def _plain(word: str) -> bool:
    """A word of letters, capitalised at most (Float, float, Communication), not BFloat16 or HCCL."""
    return word.isalpha() and not re.search(r"[A-Z]", word[1:])


def vocabulary() -> dict[str, tuple[set[str], bool]]:
    """word -> (the rules / roles spelling it, matched ignoring case). Bucket rules give the words of their match
    patterns (kernel and op names, the Ascend cores); the hardware priors their link types and GPUs' scale-up
    links; roles give their names and categories, their regexes whole and their words, the collectives' match
    words, and the dtype and process names that are no plain word (``BFloat16``, not ``Float``/``float``;
    `_NAMES_NO_PLAIN_WORDS`). The two rank-in-name patterns count whole (``rank`` is every table's column)."""
    vocab: dict[str, tuple[set[str], bool]] = {}

    def add(word: str, source: str, icase: bool) -> None:
        if _distinct(word):
            got, ic = vocab.get(word, (set(), False))
            vocab[word] = (got | {source}, ic or icase)

    for path in sorted((RULES / "buckets").glob("*.toml")):
        doc = tomllib.loads(path.read_text())
        for rule in doc.get("rule", []):
            # a `module` pattern spells fragments of model class names (Attention, Linear, Layer, Output): plain
            # words Python uses for its own things, and knowledge of models, not of kernels or ops
            for pattern in (v for k, v in rule["match"].items() if k != "module"):
                words, icase = regex_words(pattern)
                for w in words:
                    add(w, rule["id"], icase)
    for path in sorted((RULES / "hardware").glob("*.toml")):
        doc = tomllib.loads(path.read_text())
        for entry in doc.get("link", []):  # link types: HCCS, RDMA, PCIE, NVLink4, PCIe5, NIC400, …
            add(entry["link"], f"hardware/{path.name}", False)
        for device in doc.get("device", []):  # a GPU's scale-up link
            if device.get("scale_up"):
                add(device["scale_up"], f"hardware/{path.name}", False)
    roles = tomllib.loads((RULES / "roles.toml").read_text())["roles"]
    for name, entry in roles.items():
        value, source = entry["value"], f"roles.{name}"
        if name in _NAMES_NO_PLAIN_WORDS:
            for word in value:
                if not _plain(word):
                    add(word, source, False)
        elif name == "collectives":
            for c in value:
                words, icase = regex_words(c["match"])
                for w in words:
                    add(w, source, icase)
        else:
            for v in value if isinstance(value, list) else [value]:
                add(v, source, False)
                if not name.startswith("rank_in_") and re.search(r"[\^$()\[\]|\\*+?]", v):
                    words, icase = regex_words(v)
                    for w in words:
                        add(w, source, icase)
    return vocab


def bucket_names() -> set[str]:
    """The buckets rules assign (``moe``, ``communication``, ``ai_cpu``): the pack's words for its output, which
    analyses and renderers name; a string that is one is no kernel name, whatever rule spells the word."""
    out: set[str] = set()
    for path in (RULES / "buckets").glob("*.toml"):
        doc = tomllib.loads(path.read_text())
        out |= set(doc.get("pack", {}).get("buckets", [])) | {r["bucket"] for r in doc.get("rule", [])}
    return out


def _literals(source: str):
    """(line, text) of every string constant that is no docstring."""
    tree = ast.parse(source)
    docs = set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and body:
            first = body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                docs.add(id(first.value))
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs:
            yield node.lineno, node.value


# A word a file may spell, and why (as small as it can be).
ALLOWED = {
    (
        "profan/sources/trace/kineto.py",
        "kernel",
    ): "the `source` label of a collective event (SOURCE_KERNEL): profan's own "
    "word in the collectives table, equal to the Kineto category by choice",
    ("profan/sources/trace/kineto.py", "cpu_op"): "the `source` label SOURCE_CPU_OP, as above",
    ("profan/sources/trace/chrome.py", "kernel"): "the args key of a ROCm launch call naming the kernel it "
    "launches (ARGS: JSON key -> column), a field of the trace format like the other ARGS keys",
    ("profan/render/html.py", "kernel"): "a report column's name",
    ("profan/ranks/collectives.py", "nccl"): "the group label of NCCL kernels whose trace names no process group",
}
# profan/synth writes synthetic profiler output: it spells names as the profiler does, it decides nothing by them.
WRITERS = ("profan/synth/",)


def scan(root: Path = ROOT) -> list[tuple[str, int, str, str, list[str]]]:
    """(file, line, literal, word, rules spelling it) for every Python string spelling a word of the rule files."""
    vocab, buckets = vocabulary(), bucket_names()
    folded: dict[str, list[str]] = {}
    for w in vocab:
        folded.setdefault(w.casefold(), []).append(w)
    hits = []
    for py in sorted((root / "profan").rglob("*.py")):
        rel = py.relative_to(root).as_posix()
        if rel.startswith(WRITERS):
            continue
        for line, text in _literals(py.read_text(encoding="utf-8")):
            words, icase = regex_words(text)
            for w in (words | {text}) - buckets:
                found = {w} if w in vocab else set()
                found |= {v for v in folded.get(w.casefold(), []) if icase or vocab[v][1]}
                for v in sorted(found):
                    hits.append((rel, line, text, v, sorted(vocab[v][0])))
    return hits


def test_the_scan_sees_what_it_is_for():
    """The word extraction finds names inside regexes and alternations, and only whole words; the vocabulary holds
    kernel, op, category, link and engine names."""
    assert regex_words(r"(?i)^(hcom_|hccl|lccl|lcoc)|^kernel_aivec$") == (
        {"hcom_", "hccl", "lccl", "lcoc", "kernel_aivec"},
        True,
    )
    assert regex_words(r"^aten::(mm|cat)$")[0] == {"aten::mm", "aten::cat"}
    assert regex_words(r"^(hcom_[A-Za-z]+_)")[0] >= {"hcom_"}
    assert regex_words("kernel-boundness")[0] == {"kernel-boundness"}
    vocab = vocabulary()
    for word in (
        "hcom_",
        "lccl",
        "AI_CPU",
        "HCCL_AI_CPU",
        "cpu_op",
        "gpu_memcpy",
        "ProfilerStep#",
        "c10d::",
        "BFloat16",
        "dp_cp",
        "aten::cat",
        "matmul",
        "DispatchFFNCombine",
    ):
        assert word in vocab, word
    # link names: the hardware priors' links and the transports of communication.json
    for word in ("HCCS", "RDMA", "PCIE", "SIO", "SDMA", "ON_CHIP", "NVLink4", "PCIe5", "NIC400"):
        assert word in vocab, word
    # engine names: the Ascend cores and engines of the bucket rules, the GPU's device categories
    for word in ("AI_CORE", "AI_VECTOR_CORE", "MIX_AIC", "MIX_AIV", "FFTS_PLUS", "SDMA_SQE", "DSA_SQE", "gpu_memset"):
        assert word in vocab, word
    assert "rank" not in vocab and "float" not in vocab  # a column, a Python type
    assert "HCCL" in vocab and "Communication" not in vocab  # a process of trace_view.json; also a lane, a column
    assert {"moe", "ai_cpu", "communication"} <= bucket_names()


def test_no_kernel_names_in_python():
    """No string in profan/ (docstrings aside) spells a kernel, op, category, link, engine or dtype name of rules/:
    the bucket rules' match words, the hardware priors' links and every role. The engine asks the pack
    (`pack.roles`) instead. Every ALLOWED word is still spelled where it is allowed (an entry no string needs
    goes)."""
    found = scan()
    hits = [h for h in found if (h[0], h[3]) not in ALLOWED]
    assert not hits, "kernel-name knowledge in Python (move it to rules/roles.toml):\n" + "\n".join(
        f"{f}:{line}: {text!r} spells {word!r} of {', '.join(src)}" for f, line, text, word, src in hits[:40]
    )
    unused = set(ALLOWED) - {(h[0], h[3]) for h in found}
    assert not unused, f"ALLOWED entries no string needs any more: {sorted(unused)}"


# ------------------------------------------------------------------------------------------------- the roles


def test_roles_load_once_typed_and_picklable():
    pack = load()
    r = pack.roles
    assert isinstance(r, Roles) and r is default_roles()
    assert r.comm_cores == ("HCCL", "COMMUNICATION", "HCCL_AI_CPU") and r.ai_cpu_core == "AI_CPU"
    assert set(r.kineto_keep_cats) >= set(r.kineto_device_cats) | set(r.kineto_runtime_cats)
    assert [c.kind for c in r.collectives][:2] == ["allreduce", "allgather"]
    assert all(r.why[name] for name in r.why) and len(r.why) == len(Roles.__dataclass_fields__) - 2
    back = pickle.loads(pickle.dumps(pack))  # the pack goes to worker processes
    assert back.roles == r


def _user_rules(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "mine.toml"
    p.write_text(text)
    return p


def test_a_user_file_overrides_a_role(tmp_path):
    p = _user_rules(
        tmp_path,
        '[roles.comm_cores]\nvalue = ["HCCL", "COMMUNICATION", "HCCL_AI_CPU", "MY_CORE"]\n'
        'why = "a newer CANN"\n[roles.dtype_bytes]\nvalue = { Float = 4, Float8_e8m0fnu = 1 }\n',
    )
    r = load([p]).roles
    assert r.comm_cores[-1] == "MY_CORE" and r.dtype_bytes == {"Float": 4, "Float8_e8m0fnu": 1}
    assert r.why["comm_cores"] == "a newer CANN" and r.ai_cpu_core == "AI_CPU" and str(p) in r.source
    assert default_roles().comm_cores[-1] == "HCCL_AI_CPU"  # the built-in ones are untouched


@pytest.mark.parametrize(
    "text, says",
    [
        ('[roles.comm_kores]\nvalue = ["HCCL"]\n', "no role 'comm_kores'"),
        ('[roles.comm_cores]\nvalue = "HCCL"\n', "comm_cores] value must be a list of non-empty texts"),
        ('[roles.comm_ops]\nvalue = "(unclosed"\n', "invalid regular expression"),
        ('[roles.hccl_group_tag]\nvalue = "^hcom_"\n', "needs a group"),
        ('[roles.dtype_bytes]\nvalue = { Float = "4" }\n', "dtype name = bytes"),
        ('[roles.collectives]\nvalue = [{ kind = "x", match = "x", nelems = "all", bus_factor = "1" }]\n', "nelems"),
        ('[roles.ai_cpu_core]\nvalue = "AI_CPU"\nsource = "x"\n', "no setting 'source'"),
        ('[roles.ai_cpu_core]\nwhy = "x"\n', "must be a table with a value"),
        ("roles = 3\n", "[roles] must be a table"),
        *[(f'[roles.{name}]\nvalue = "x"\n', "cannot be set in a rules file") for name in sorted(BUILTIN_ONLY)],
    ],
)
def test_a_wrong_role_is_one_line_naming_the_file(tmp_path, text, says):
    p = _user_rules(tmp_path, text)
    with pytest.raises(ProfanInputError) as e:
        load([p])
    assert e.value.path == str(p) and says in e.value.problem and "\n" not in e.value.problem


def test_the_roles_file_is_checked_whole(tmp_path):
    from profan.rulepack.roles import load as load_roles

    text = (RULES / "roles.toml").read_text()
    p = tmp_path / "roles.toml"
    p.write_text(re.sub(r"\[roles\.ai_cpu_core\]\n(.+\n)+", "", text))
    with pytest.raises(ProfanInputError, match="lacks ai_cpu_core"):
        load_roles(p)
    p.write_text(text + "\n[other]\nx = 1\n")
    with pytest.raises(ProfanInputError, match=r"only \[roles.<name>\] tables"):
        load_roles(p)


# ------------------------------------------------------------------------------------------------ dtype bytes

# bytes per element of c10's ScalarType names (c10/core/ScalarType.h), and the other spellings the table keeps
C10_BYTES = {
    "Byte": 1,
    "Char": 1,
    "Short": 2,
    "Int": 4,
    "Long": 8,
    "Half": 2,
    "Float": 4,
    "Double": 8,
    "ComplexFloat": 8,
    "ComplexDouble": 16,
    "Bool": 1,
    "BFloat16": 2,
    "Float8_e5m2": 1,
    "Float8_e4m3fn": 1,
    "UInt16": 2,
    "UInt32": 4,
    "UInt64": 8,
    "float": 4,
    "Float32": 4,
    "Float16": 2,
}


def _trace_dtypes() -> set[str]:
    out = set()
    for path in (FIXTURES / "torch").rglob("*.json*"):
        opener = gzip.open if path.name.endswith(".gz") else open
        with opener(path, "rt", encoding="utf-8", errors="replace") as fh:
            out |= set(re.findall(r'"dtype":\s*"([^"]+)"', fh.read()))
    return out


def test_one_dtype_table_sizes_every_kineto_dtype():
    table = default_roles().dtype_bytes
    assert table == C10_BYTES  # the two former tables merged: every entry of both, no value in dispute
    seen = _trace_dtypes()
    assert seen and seen <= set(table), f"dtypes of the fixture traces without a size: {seen - set(table)}"


def test_kineto_and_nccl_size_messages_with_the_same_table():
    from profan.analyses.communication import nccl
    from profan.sources.trace import kineto

    kt = kineto.load(FIXTURES / "torch" / "nccl_a100_1rank" / "nccl_data.json.gz")
    c = kt.collectives.filter(pl.col("dtype").is_not_null())
    assert c.height > 0
    table = default_roles().dtype_bytes
    for row in c.iter_rows(named=True):
        assert row["bytes"] == max(row["in_nelems"], row["out_nelems"]) * table[row["dtype"]]
    # a dtype only the NCCL table had (Float16, ComplexFloat) is sized by the trace reader too, the same way
    frame = pl.DataFrame(
        {
            "coll_name": ["allreduce", "broadcast"],
            "in_nelems": [10, 10],
            "out_nelems": [10, 10],
            "dtype": ["Float16", "ComplexFloat"],
            "group_size": [2, 2],
            "dur_us": [1.0, 1.0],
        }
    )
    assert nccl.nccl_bandwidth(frame)["dtype_bytes"].to_list() == [2, 8]


# ------------------------------------------------------------------------------------- lccl / lcoc communication


def _rules_by_id() -> dict[str, object]:
    return {r.id: r for r in load().rules}


def test_the_communication_roles_are_the_communication_rules():
    """One pattern in two places of the pack: the breakdown's bucket rules and the collective detection's roles."""
    rules, r = _rules_by_id(), default_roles()
    assert r.comm_ops == rules["ASC-COMM-002"].match["op"]
    assert rules["ASC-COMM-001"].match == {"core": f"^({'|'.join(r.comm_cores)})$"}
    assert r.ai_cpu_core in regex_words(rules["ASC-AICPU-001"].match["core"])[0]
    assert r.kineto_comm_kernels == rules["GPU-COMM-001"].match["name"]


LCCL_ROWS = pl.DataFrame(
    {
        "step": [1, 1, 1, 1],
        "loc": [2, 3, 4, 5],
        "name": ["MatMulV3", "lcclAllReduce_1", "LcocMatmulAllReduce", "hcom_allReduce__586_0_1"],
        "op": ["MatMulV3", "lcclAllReduce", "LcocMatmulAllReduce", "hcom_allReduce_"],
        "type": ["MatMulV3", "lcclAllReduce", "LcocMatmulAllReduce", "hcom_allReduce_"],
        "core": ["AI_CORE", "AI_VECTOR_CORE", "MIX_AIV", "COMMUNICATION"],
        "start_us": [0.0, 10.0, 20.0, 30.0],
        "dur_us": [5.0, 5.0, 5.0, 5.0],
    }
)


def test_lccl_and_lcoc_rows_are_communication_in_the_breakdown_and_the_roles():
    pack = load()
    got = classify(LCCL_ROWS, pack.rules_for("ascend"))
    # a matmul with no layer around it to place it: a GEMM of no known layer
    assert got["bucket"].to_list() == ["gemm", "communication", "communication", "communication"]
    assert got["rule_id"].to_list()[1:3] == ["ASC-COMM-002", "ASC-COMM-002"]
    assert LCCL_ROWS.select(pack.roles.is_comm())[:, 0].to_list() == [False, True, True, True]


def test_lccl_and_lcoc_rows_are_collectives():
    """Without communication.json, the collectives are the kernel rows of communication ops: lccl/lcoc ones too,
    as the breakdown counts them."""
    import dataclasses
    import inspect

    from profan.ranks import collectives

    pack, file = load(), "kernel_details.csv"
    if "ranks" in inspect.signature(collectives.ascend_collectives).parameters:  # one call for all ranks
        fields = {f.name for f in dataclasses.fields(collectives.AscendRank)}
        given = {
            "comm_ops": None,
            "comm_file": None,
            "kernel_path": Path(file),
            "kernel_file": file,
            "n_records": None,
            "groups": None,
            "timed": LCCL_ROWS,
        }
        rank = collectives.AscendRank(**{k: v for k, v in given.items() if k in fields})
        ((colls, _),) = collectives.ascend_collectives([rank], pack)
    else:
        colls, _ = collectives.ascend_collectives(None, file, None, None, None, pack, timed=LCCL_ROWS)
    assert colls is not None
    assert colls["name"].to_list() == ["lcclAllReduce_1", "LcocMatmulAllReduce", "hcom_allReduce__586_0_1"]


def test_the_trace_name_rank_pattern_is_the_roles_one():
    from profan.sources.discovery.sniff import rank_in_name
    from profan.sources.trace.kineto import rank_of

    assert rank_in_name("trace").pattern == default_roles().rank_in_trace_name
    assert rank_in_name("folder").search("test_rank_3").group(1) == "3"
    assert rank_of({}, Path("worker7.pt.trace.json"))[0] == 7
