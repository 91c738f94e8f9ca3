"""Cards verify themselves: the trailer md5, the format line by line, the file and line named."""
from __future__ import annotations

import os

import numpy as np
import pytest
from mojolike.cards import reference_path

from mojolike.core import cardformat
from mojolike.core.cardformat import CardError, parse


def _card(n: int = 3) -> str:
    return cardformat.render("demo.v1", [cardformat.record(f"case{i}", "out", np.float32([i]))
                                         for i in range(n)])


def _with_trailer(body: str) -> str:
    return body + f"# md5={cardformat.md5_text(body)}\n"


def _refusal(text: str) -> CardError:
    with pytest.raises(CardError) as info:
        parse(text, "x.card")
    return info.value


def test_a_card_ends_with_the_md5_of_every_line_above_it():
    text = _card()
    body, trailer = text[:text.rindex("# md5=")], text.splitlines()[-1]
    assert trailer == f"# md5={cardformat.md5_text(body)}"
    card = parse(text, "x.card")
    assert card.md5 == cardformat.card_md5(text) == cardformat.md5_text(body)
    assert card.profile == "demo.v1" and list(card.records) == ["case0/out", "case1/out", "case2/out"]


def test_the_card_identity_is_the_md5_of_the_body_so_published_md5s_stay_valid():
    # the committed fold card's body (everything above its trailer, or all of it before trailers)
    text = reference_path("fold").read_text()
    body = text[:text.index("# md5=")] if "\n# md5=" in text else text
    assert cardformat.md5_text(body) == "f829d3a3f4fd822a762ffba5f973b1e5"


@pytest.mark.parametrize("text,line,words", [
    ("", 1, "empty"),
    ("garbage\n", 1, "profile="),
    ("# mojolike card profile=\n# records=0\n", 1, "profile="),
    ("# mojolike card profile=p\nc/o n=1 md5=ABCDEF0123456789abcdef0123456789\n# records=1\n", 2, "lowercase hex"),
    ("# mojolike card profile=p\nc/o n=x md5=0123456789abcdef0123456789abcdef\n# records=1\n", 2, "record"),
    ("# mojolike card profile=p\nco n=1 md5=0123456789abcdef0123456789abcdef\n# records=1\n", 2, "record"),
    ("# mojolike card profile=p\nc/o n=1 md5=0123456789abcdef0123456789abcde\n# records=1\n", 2, "record"),
    ("# mojolike card profile=p\nc/o n=1 md5=0123456789abcdef0123456789abcdef\n"
     "c/o n=1 md5=0123456789abcdef0123456789abcdef\n# records=2\n", 3, "duplicate record 'c/o'"),
    ("# mojolike card profile=p\nc/o n=1 md5=0123456789abcdef0123456789abcdef\n# records=2\n", 3,
     "records=2 but the card has 1"),
    ("# mojolike card profile=p\nc/o n=1 md5=0123456789abcdef0123456789abcdef\n", 3, "# records="),
])
def test_a_malformed_card_is_refused_naming_the_file_and_line(text, line, words):
    body_only = _with_trailer(text) if text.endswith("\n") else text
    e = _refusal(body_only)
    assert (e.source, e.line) == ("x.card", line) and words in e.reason
    assert str(e).startswith(f"x.card, line {line}: ")


def test_a_card_without_its_trailer_is_refused():
    text = _card()
    e = _refusal(text[:text.rindex("# md5=")])
    assert e.line == 6 and "trailer" in e.reason and "end of the file" in e.reason


def test_a_card_whose_trailer_does_not_match_is_refused():
    lines = _card().splitlines(keepends=True)
    lines[2] = lines[2].replace("n=1", "n=2")
    e = _refusal("".join(lines))
    assert e.line == 6 and "does not match" in e.reason


def test_a_forged_trailer_is_refused():
    text = _card()
    e = _refusal(text[:-33] + "0" * 32 + "\n")
    assert e.line == 6 and "does not match" in e.reason


@pytest.mark.parametrize("tail", ["extra\n", "\n", "# md5=0\n"])
def test_anything_after_the_trailer_is_refused(tail):
    e = _refusal(_card() + tail)
    assert e.line == 7 and "after the trailer" in e.reason


def test_a_trailer_without_its_newline_is_refused():
    e = _refusal(_card()[:-1])
    assert e.line == 6 and "newline" in e.reason


def test_windows_line_endings_are_refused():
    e = _refusal(_card().replace("\n", "\r\n"))
    assert e.line == 1


def test_a_binary_file_is_refused_by_name(tmp_path):
    p = tmp_path / "junk.card"
    p.write_bytes(b"# mojolike card profile=p\n\xff\xfe\n")
    with pytest.raises(CardError) as info:
        cardformat.read(p)
    assert info.value.source == str(p) and info.value.line == 2 and "0xff" in info.value.reason


def test_card_errors_are_value_errors_not_refusals():
    from mojolike import Refusal
    assert issubclass(CardError, ValueError) and not issubclass(CardError, Refusal)


def test_cards_and_metas_get_the_umasks_permissions_not_0600(tmp_path):
    old = os.umask(0o022)
    try:
        for mask, mode in ((0o022, 0o644), (0o077, 0o600)):
            os.umask(mask)
            card, meta = tmp_path / f"{mask:o}.card", tmp_path / f"{mask:o}.meta.json"
            cardformat.write_atomic(card, _card())
            cardformat.write_json_atomic(meta, {"backend": "oracle"})
            assert oct(card.stat().st_mode & 0o777) == oct(mode)
            assert oct(meta.stat().st_mode & 0o777) == oct(mode)
            assert parse(card.read_text(), str(card)).md5 == cardformat.card_md5(_card())
    finally:
        os.umask(old)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["22.card", "22.meta.json", "77.card",
                                                          "77.meta.json"]  # no temporary left
