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
