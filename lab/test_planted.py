"""Plausible bugs, each planted in a scratch copy of the project: the fast tests named beside it must fail.

    python -m pytest -q -m slow lab/test_planted.py      # every bug, one at a time (a few minutes)

A bug is (file, the exact text it replaces, the text with the bug, the fast tests that should notice).
It is planted with exercises.students_copy.plant, the tests run in the copy with `-m "not slow" -x`, and
the file is restored. A bug that no named test catches fails here until a test catches it. A text that
is no longer in the library (plant's ValueError) fails too: the library changed, so update its entry.
The 30 bugs took 297 s (203 s of CPU) on 2 cores shared with a training run; a students' copy skips the list.
"""
import subprocess
import sys
import time
from pathlib import Path

import pytest

from exercises.students_copy import plant, scratch_copy, unwritten

T = "test_all.py::"
BUGS = {
    # A.1's pruning: thresholds
    "largest eigenvalue pruned at the threshold": (
        "prune.py", '(m["largest eigenvalue"] < cfg.eigenvalue_below)', '(m["largest eigenvalue"] <= cfg.eigenvalue_below)',
        (T + "test_a_head_exactly_on_a_pruning_threshold_is_kept_and_one_just_past_it_goes",)),
    "condition number pruned at the threshold": (
        "prune.py", '(m["condition"] > cfg.condition_above)', '(m["condition"] >= cfg.condition_above)',
        (T + "test_a_head_exactly_on_a_pruning_threshold_is_kept_and_one_just_past_it_goes",)),
    # data: statistics, layout, augmentation, batches
    "channel_stats returns the variance": (
        "data.py", "return x.mean(1).float(), x.std(1).float()", "return x.mean(1).float(), x.var(1).float()",
        (T + "test_channel_stats_are_each_channels_mean_and_std_on_the_0_1_scale",)),
    "CIFAR-10 read channels last": (
        "data.py", "Split(data.view(-1, 3, 32, 32), labels)", "Split(data.view(-1, 32, 32, 3).permute(0, 3, 1, 2), labels)",
        (T + "test_loader_reads_the_official_layout_from_an_archive",)),
    "crop offsets miss the last one": (
        "data.py", "torch.randint(0, 2 * pad + 1, (2, B, 1)", "torch.randint(0, 2 * pad, (2, B, 1)",
        (T + "test_augmentation_takes_every_offset_of_the_padding_and_both_flips",)),
    "std not on the pixels' 0-255 scale": (
        "data.py", "self.std = torch.as_tensor(std, device=device).view(1, 3, 1, 1) * 255",
        "self.std = torch.as_tensor(std, device=device).view(1, 3, 1, 1)",
        (T + "test_batches_keep_labels_with_their_images_and_are_deterministic",)),
    "evaluation drops the ragged last batch": (
        "data.py", "self.steps = self.size // batch_size if train else -(-self.size // batch_size)",
        "self.steps = self.size // batch_size", (T + "test_evaluate_sums_eval_modes_loss_and_correct_over_every_test_image",)),
    # train.py: data, optimizer, schedule, evaluation, checkpoints
    "load_data swaps train and test": (
        "train.py", "return (train_set, test_set) + data_lib.channel_stats", "return (test_set, train_set) + data_lib.channel_stats",
        (T + "test_load_data_gives_the_training_split_its_subset_and_normalizes_by_the_training_images",)),
    "weight decay on the positions, not the weights": (
        "train.py", "weight_decay=cfg.weight_decay if decayed else 0.0", "weight_decay=0.0 if decayed else cfg.weight_decay",
        (T + "test_only_gaussian_centers_and_spreads_escape_weight_decay[quadratic-undecayed0]",)),
    "cosine counted from step 0": (
        "train.py", "(step - w) / max(1, total_steps - w)", "step / max(1, total_steps)",
        ("lab/test_lab.py::test_summed_position_lr_follows_the_schedule_of_the_run",
         T + "test_end_to_end_attention_run_writes_everything")),
    "warm-up a step late": (
        "train.py", "if step < w:", "if step <= w:", ("lab/test_lab.py::test_summed_position_lr_follows_the_schedule_of_the_run",)),
    "evaluation in training mode": (
        "train.py", "    net.eval()\n    totals = 0", "    net.train()\n    totals = 0",
        (T + "test_evaluate_sums_eval_modes_loss_and_correct_over_every_test_image",)),
    "gradient scaler never updated": (
        "train.py", "        scaler.update()\n", "",
        (T + "test_fp16_with_a_gradient_scaler_trains_and_checkpoints_the_scaler",)),
    "restore forgets the schedule": (
        "train.py", '    schedule.load_state_dict(checkpoint["scheduler"])\n', "",
        (T + "test_restore_puts_back_every_state_that_save_checkpoint_saved",)),
    "restore forgets the gradient scaler": (
        "train.py", '    scaler.load_state_dict(checkpoint["scaler"])\n', "",
        (T + "test_restore_puts_back_every_state_that_save_checkpoint_saved",)),
    "restore forgets the random numbers": (
        "train.py", '    torch.set_rng_state(checkpoint["rng"]["torch"])\n', "",
        (T + "test_restore_puts_back_every_state_that_save_checkpoint_saved",)),
    "checkpoint without the step within the epoch": (
        "train.py", "step=run.step if run else 0,", "step=0,",
        (T + "test_restore_puts_back_every_state_that_save_checkpoint_saved",)),
    # records.py
    "a resumed run's logs lose their last kept line": (
        "records.py", "if json.loads(l)[key] <= last]", "if json.loads(l)[key] < last]",
        (T + "test_a_resumed_runs_logs_keep_the_lines_up_to_its_checkpoint",)),
    "test loss and accuracy swapped": (
        "records.py", "test_loss, test_acc = (test_sums[:2] / test_sums[2])", "test_acc, test_loss = (test_sums[:2] / test_sums[2])",
        (T + "test_an_epochs_record_divides_its_sums_into_losses_and_accuracies",)),
    # model.py and attention.py
    "space_to_depth with H and W swapped": (
        "model.py", "x = x.view(B, C, H // block, block, W // block, block)", "x = x.view(B, C, W // block, block, H // block, block)",
        (T + "test_the_network_is_section_4_1s_written_out_by_hand", T + "test_space_to_depth_is_a_permutation")),
    "pre-LN feed-forward": (
        "model.py", "return self.norm2(x + self.dropout(self.ffn(x)))", "return x + self.dropout(self.ffn(self.norm2(x)))",
        (T + "test_the_network_is_section_4_1s_written_out_by_hand",)),
    "ResNet18's last stage not strided": (
        "model.py", "(8 * width, 2)):", "(8 * width, 1)):", (T + "test_paper_convention_flops_within_one_percent[resnet18]",)),
    "fast layer concatenates heads in the wrong order": (
        "attention.py", "y = y.view(self.heads, T, B, D).permute(2, 1, 0, 3)", "y = y.view(self.heads, T, B, D).permute(2, 1, 3, 0)",
        (T + "test_fast_equals_dense[False-grid0-gaussian]",)),
    "factorized heads stacked on the wrong axis": (
        "attention.py", "y = torch.stack(mixed, dim=-2)", "y = torch.stack(mixed, dim=-1)",
        (T + "test_fast_equals_dense[False-grid0-quadratic]",)),
    # measures.py and visualize.py
    "central query off by one on an even grid": (
        "measures.py", "return P[:, (H // 2) * W + W // 2]", "return P[:, ((H - 1) // 2) * W + (W - 1) // 2]",
        (T + "test_a_convolution_built_by_theorem_1_is_local_and_covers_its_grid",
         T + "test_around_the_query_counts_one_pixel_heads_by_ring_and_side")),
    "window off by one on an even grid": (
        "measures.py", "r, c = H // 2 - size // 2, W // 2 - size // 2", "r, c = (H - 1) // 2 - size // 2, (W - 1) // 2 - size // 2",
        (T + "test_locality_is_the_kernel_energy_near_the_query",)),
    "overlap averaged over every pair, a head with itself too": (
        "measures.py", "max(heads * (heads - 1), 1)", "max(heads * heads, 1)",
        (T + "test_a_uniform_layer_has_the_window_share_of_the_grid_and_full_overlap",)),
    "tail of fresh starts counts strictly more": (
        "measures.py", "(total >= observed)", "(total > observed)",
        (T + "test_the_chance_that_fresh_starts_hold_as_many_pixels_is_their_drawn_tail",)),
    "probability region one key short": (
        "visualize.py", "min(int((cumulative < m).sum()), len(sorted_p) - 1)", "min(int((cumulative < m).sum()) - 1, len(sorted_p) - 1)",
        (T + "test_probability_regions_of_a_known_gaussian_hold_their_mass",)),
    # runtime.py
    "bf16 from capability 9, not 8": (
        "runtime.py", "if major >= 8:", "if major > 8:",
        (T + "test_precision_is_what_the_hardware_computes_natively[cuda-capability2-None-bf16]",)),
}


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> Path:
    return scratch_copy(tmp_path_factory.mktemp("planted") / "project")


@pytest.mark.slow
def test_every_planted_bug_fails_the_fast_tests_named_for_it(project):
    if unwritten(project) or not (project / "exercises/answers").is_dir():  # a students' copy (it ships without this file)
        pytest.skip("a students' copy: its functions are the student's, so the bugs' text is not there to plant")
    started, escaped = time.perf_counter(), []
    for name, (file, old, new, tests) in BUGS.items():
        began, original = time.perf_counter(), (project / file).read_text()
        plant(project, file, old, new)  # a ValueError: the library's text changed; update the entry
        try:
            run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-x", "-m", "not slow", "-p", "no:cacheprovider",
                                  *tests], cwd=project, capture_output=True, text=True, timeout=600)
        finally:
            (project / file).write_text(original)
        last = run.stdout.splitlines()[-1] if run.stdout else run.stderr[-300:]
        print(f"{time.perf_counter() - began:5.1f} s  {name}: {last}")
        if run.returncode != 1 or " failed" not in last:
            escaped.append(f"{name} (exit {run.returncode}): {last}")
    seconds = time.perf_counter() - started
    print(f"{len(BUGS)} planted bugs, {len(BUGS) - len(escaped)} caught, in {seconds:.0f} s")
    assert not escaped, "\n".join(escaped)
