import gzip

import pytest

from vaswani.data.corpus import DataError, filter_pairs, read_lines, read_parallel


def test_reads_plain_and_gzip_and_normalises_separators(tmp_path):
    text = "a\x00b\r\nline\u2028two\n  padded  \n"
    (tmp_path / "x.txt").write_text(text, encoding="utf-8", newline="")
    with gzip.open(tmp_path / "x.txt.gz", "wt", encoding="utf-8", newline="") as f:
        f.write(text)
    expected = ["a b", "line two", "padded"]
    assert read_lines(tmp_path / "x.txt") == expected
    assert read_lines(tmp_path / "x.txt.gz") == expected


def test_invalid_utf8_is_an_error_naming_file_and_line_or_replaced(tmp_path):
    path = tmp_path / "bad.txt"
    path.write_bytes(b"fine\nbro\xffken\n")
    with pytest.raises(DataError, match=r"bad\.txt, line 2: invalid UTF-8.*data\.invalid_utf8: replace"):
        read_lines(path)
    assert read_lines(path, invalid_utf8="replace") == ["fine", "bro\ufffdken"]


def test_different_line_counts_name_both_files_and_counts(tmp_path):
    (tmp_path / "a.src").write_text("1\n2\n3\n")
    (tmp_path / "a.tgt").write_text("1\n2\n")
    with pytest.raises(DataError, match=r"a\.src has 3 lines but .*a\.tgt has 2"):
        read_parallel(tmp_path / "a.src", tmp_path / "a.tgt")


def test_missing_file_is_named(tmp_path):
    with pytest.raises(DataError, match=r"nope\.txt: file not found"):
        read_lines(tmp_path / "nope.txt")


def test_filters_count_every_removed_pair_by_reason():
    pairs = [([1, 2], [3]), ([], [4]), ([5] * 30, [6]), ([7] * 6, [8] * 40), ([9] * 6, [9] * 7)]
    keep, report = filter_pairs(pairs, max_len=20, max_ratio=3.0)
    assert keep == [0, 4]
    assert report.total == 5 and report.kept == 2
    assert report.removed == {"empty source or target": 1, "longer than data.max_len=20": 2}
    keep, report = filter_pairs(pairs, max_len=50, max_ratio=3.0)
    assert keep == [0, 2, 4] and report.removed["length ratio above data.max_len_ratio=3.0"] == 1


def test_lowercase_option_lowercases_training_and_validation_text(tmp_path):
    from vaswani.config import DataConfig
    from vaswani.data.parallel import ParallelRecipe
    from vaswani.data.prepare import open_or_prepare
    from vaswani.data.tokenizer import Tokenizer
    from vaswani.train.loader import load_run_data

    files = {}
    texts = {"ts": "Ein Mann\nÄPFEL\n", "tt": "A Man\nApples\n", "vs": "Zwei Hunde\n", "vt": "Two Dogs\n"}
    for name, text in texts.items():
        files[name] = tmp_path / name
        files[name].write_text(text, encoding="utf-8")
    data = DataConfig(
        train_src=str(files["ts"]),
        train_tgt=str(files["tt"]),
        valid_src=str(files["vs"]),
        valid_tgt=str(files["vt"]),
        tokenizer="char",
        vocab_size=40,
    )
    for lowercase, expected in (
        (False, [("Ein Mann", "A Man"), ("ÄPFEL", "Apples")]),
        (True, [("ein mann", "a man"), ("äpfel", "apples")]),
    ):
        config = DataConfig(**{**data.__dict__, "lowercase": lowercase})
        directory = tmp_path / f"prepared-{lowercase}"
        prepared = open_or_prepare(ParallelRecipe.from_config(config, True, 1), directory, workers=1)
        run = load_run_data(prepared, Tokenizer.load(directory), config)
        train = prepared.train
        assert [tuple(run.tokenizer.decode_tgt([train.src[i], train.tgt[i]])) for i in range(2)] == expected
        assert run.valid_text == [("zwei hunde", "two dogs") if lowercase else ("Zwei Hunde", "Two Dogs")]


# Issue 60: parallel text as users bring it (tests/fuzz/corpus.py found each).
def _gz(path, data: bytes, damage: str):
    """`data` gzipped into `path`, truncated or with a byte of its deflate stream flipped."""
    packed = bytearray(gzip.compress(data, mtime=0))
    if damage == "truncated":
        packed = packed[: len(packed) // 2]
    else:
        packed[12] ^= 0x5A
    path.write_bytes(bytes(packed))
    return path


@pytest.mark.parametrize("damage", ["truncated", "corrupt"])
def test_a_damaged_gzip_file_is_named_wherever_it_is_read(tmp_path, damage):
    """A corrupt deflate stream raised zlib.error (no OSError) from every reader; a truncated one, EOFError from
    translate's line counting."""
    from vaswani.data.corpus import LineReader
    from vaswani.data.streaming import raw_chunks

    path = _gz(tmp_path / "train.de.gz", ("ein Mann fährt Fahrrad\n" * 200).encode(), damage)
    (tmp_path / "train.en").write_text("a man rides a bike\n" * 200, encoding="utf-8")
    readers = (
        lambda: read_lines(path),
        lambda: list(raw_chunks(path, tmp_path / "train.en", 64)),
        lambda: list(LineReader(path).chunks(8)),
    )
    for read in readers:
        with pytest.raises(DataError, match=r"train\.de\.gz: cannot read .*truncated or corrupt"):
            read()


def test_a_file_that_is_not_gzip_is_named_by_translate_s_reader(tmp_path):
    """LineReader counted the lines of a .gz that is not gzip and let gzip's bare BadGzipFile out."""
    from vaswani.data.corpus import LineReader

    (tmp_path / "in.txt.gz").write_text("plain text\n", encoding="utf-8")
    with pytest.raises(DataError, match=r"in\.txt\.gz: cannot read \(Not a gzipped file"):
        LineReader(tmp_path / "in.txt.gz")


def test_a_bom_starting_a_file_is_no_part_of_its_first_line(tmp_path):
    """The BOM Windows editors write was kept in the first sentence (its first piece a BOM glued to a word); a file
    holding only a BOM was one empty line to the streaming reader and none to read_lines."""
    from vaswani.data.corpus import LineReader
    from vaswani.data.labelled import read_labelled
    from vaswani.data.streaming import raw_chunks

    path = tmp_path / "train.de"
    path.write_bytes(b"\xef\xbb\xbfein Mann\r\nzwei\n")
    assert read_lines(path) == ["ein Mann", "zwei"]
    assert [line for _, chunk in LineReader(path).chunks(8) for line in chunk] == ["ein Mann", "zwei"]
    assert LineReader(path).read_text() == "ein Mann\r\nzwei\n"  # --document, --format html|markdown
    assert next(raw_chunks(path, path, 8))[1] == [b"ein Mann\r", b"zwei"]
    (tmp_path / "only").write_bytes(b"\xef\xbb\xbf")
    assert read_lines(tmp_path / "only") == [] and list(raw_chunks(tmp_path / "only", tmp_path / "only", 8)) == []
    assert LineReader(tmp_path / "only").total == 0
    (tmp_path / "sst.tsv").write_bytes(b"\xef\xbb\xbfsentence\tlabel\ngood film\t1\nbad film\t0\n")
    assert [label for _, label, _ in read_labelled(tmp_path / "sst.tsv")] == ["1", "0"]  # the header found
