"""The +docs benchmark data without a GPU or torch: benchlib.py doc-tokens writes a version 3
token file byte for byte as src/data/token_file.h lays it out (header, ids, document table),
its documents are 200-3000 tokens and seeded, read_document_tokens rejects other layouts and
an inconsistent table, and the windows PyTorch trains on (document_windows, window_layout in
bench/flex_documents.py) have the documents, positions and targets shardtrain's
data.packing = documents gives them. Run: python3 -m unittest discover -s tests/bench -p '*_test.py'.
"""
import os
import struct
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "bench"))
import benchlib  # noqa: E402
import flex_documents  # noqa: E402  (imports no torch at module level)


class DocumentTokensTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.config = os.path.join(self.dir.name, "config.json")
        with open(self.config, "w") as f:
            f.write('{"vocab_size": 1000}')
        self.path = os.path.join(self.dir.name, "docs.bin")

    def tearDown(self):
        self.dir.cleanup()

    def test_lengths_are_uniform_in_range_and_seeded(self):
        starts = benchlib.document_starts(200000)
        lengths = [b - a for a, b in zip(starts, starts[1:])]
        self.assertEqual(starts[0], 0)
        self.assertTrue(all(200 <= n <= 3000 for n in lengths))
        self.assertLess(abs(sum(lengths) / len(lengths) - 1600), 250)
        self.assertEqual(starts, benchlib.document_starts(200000))
        self.assertNotEqual(starts, benchlib.document_starts(200000, seed=5))

    def test_file_layout_is_token_file_version_3(self):
        benchlib.write_document_tokens(self.config, self.path, 4096, 3)
        with open(self.path, "rb") as f:
            data = f.read()
        n = 3 * 4096
        magic, version, flags, n_tokens, packed = struct.unpack_from("<8sIIQQ", data)
        self.assertEqual((magic, version, flags, n_tokens, packed), (b"SHTOKENS", 3, 0, n, 4096))
        (count,) = struct.unpack_from("<Q", data, 32 + 4 * n)
        self.assertEqual(len(data), 32 + 4 * n + 8 + 8 * count)  # nothing follows the table
        starts = list(struct.unpack_from(f"<{count}Q", data, 32 + 4 * n + 8))
        self.assertEqual(starts, benchlib.document_starts(n, seed=1))
        ids = struct.unpack_from(f"<{n}I", data, 32)
        self.assertLess(max(ids), 1000)
        read_ids, read_starts = benchlib.read_document_tokens(self.path)
        self.assertEqual(list(read_ids), list(ids))
        self.assertEqual(read_starts, starts)

    def test_other_layouts_and_bad_tables_are_refused(self):
        benchlib.write_tokens(self.config, self.path, 16, 2)  # version 1
        with self.assertRaisesRegex(ValueError, "not a version 3"):
            benchlib.read_document_tokens(self.path)
        with open(self.path, "wb") as f:  # starts not increasing
            f.write(struct.pack("<8sIIQQ", b"SHTOKENS", 3, 0, 4, 4) + struct.pack("<4I", 1, 2, 3, 4)
                    + struct.pack("<Q", 2) + struct.pack("<2Q", 0, 0))
        with self.assertRaisesRegex(ValueError, "inconsistent"):
            benchlib.read_document_tokens(self.path)

    def test_windows_start_a_document_at_their_first_token(self):
        starts = [0, 5, 10, 16, 20]
        # Window [0, 8): 0 and 5; [8, 16): the document from 5 continues as a piece, then 10;
        # [16, 24): 16 begins at the window's start, then 20. The remainder (24 of 26) is dropped.
        self.assertEqual(benchlib.document_windows(starts, 26, 8), [[0, 5], [0, 2], [0, 4]])

    def test_window_layout_positions_documents_and_targets(self):
        documents, positions, firsts = flex_documents.window_layout([0, 3, 4], 6)
        self.assertEqual(documents, [0, 0, 0, 1, 2, 2])
        self.assertEqual(positions, [0, 1, 2, 0, 0, 1])
        self.assertEqual(firsts, [0, 3, 4])
        with self.assertRaises(ValueError):
            flex_documents.window_layout([1, 3], 6)
        with self.assertRaises(ValueError):
            flex_documents.window_layout([0, 6], 6)


if __name__ == "__main__":
    unittest.main()
