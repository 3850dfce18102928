"""The plausible mistakes of each day, planted one at a time in a copy of the library by
exercises/test_exercises.py: {day: {name: (file, the library's text, the text with the mistake)}}.
Each must make its day's check FAIL. Their text is the solution's, so a students' copy leaves them out."""

MISTAKES = {}

# day 1: exercises/day1_check.py
MISTAKES[1] = {
    "logits' sign flipped": ("attention.py", "return -self.alpha.view(-1, *[1] * (delta.dim() - 1)) * (d**2).sum(-1)",
                             "return self.alpha.view(-1, *[1] * (delta.dim() - 1)) * (d**2).sum(-1)"),
    "center added, not subtracted": ("attention.py",
                                     "d = delta[None] - self.centers.view(-1, *[1] * (delta.dim() - 1), 2)\n"
                                     "        return -self.alpha",
                                     "d = delta[None] + self.centers.view(-1, *[1] * (delta.dim() - 1), 2)\n"
                                     "        return -self.alpha"),
    "P transposed in forward": ("attention.py", 'torch.einsum("bhqk,bkd->bqhd"', 'torch.einsum("bhkq,bkd->bqhd"'),
    "heads interleaved in the concatenation": ("attention.py", 'torch.einsum("bhqk,bkd->bqhd"',
                                               'torch.einsum("bhqk,bkd->bqdh"'),
    "the kernel flipped": ("prove.py", "rows = torch.arange(kh, device=weight.device) - kh // 2",
                           "rows = kh // 2 - torch.arange(kh, device=weight.device)"),
    "kernel rows and columns swapped": ("prove.py", "centers = torch.cartesian_prod(rows, cols)",
                                        "centers = torch.cartesian_prod(cols, rows)"),
    "W^(h) blocks in the wrong order": ("prove.py", ".permute(0, 2, 1).reshape(C_out, -1)", ".reshape(C_out, -1)"),
    "theta over n >= 0 only": ("prove.py", "off = 4 * tail + 4 * tail * tail", "off = 2 * tail + tail * tail"),
    "one axis only": ("prove.py", "off = 4 * tail + 4 * tail * tail", "off = 2 * tail"),
    "1 - 1 / theta^2 in float64": ("prove.py", "return off / (1 + off)", "return 1 - 1 / (1 + off)"),
}

# day 2: exercises/day2_check.py
MISTAKES[2] = {
    "space_to_depth: H and W swapped": ("model.py", "x = x.view(B, C, H // block, block, W // block, block)",
                                        "x = x.view(B, C, W // block, block, H // block, block)"),
    "space_to_depth: the colors outer": ("model.py", "x.permute(0, 2, 4, 3, 5, 1)", "x.permute(0, 2, 4, 1, 3, 5)"),
    "space_to_depth: the block read (col, row)": ("model.py", "x.permute(0, 2, 4, 3, 5, 1)",
                                                  "x.permute(0, 2, 4, 5, 3, 1)"),
    "Block: pre-LN": ("model.py",
                      "x = self.norm1(x + self.dropout(self.attention_out(self.attention(x))))  # [B, H, W, dim]\n"
                      "        return self.norm2(x + self.dropout(self.ffn(x)))",
                      "x = x + self.dropout(self.attention_out(self.attention(self.norm1(x))))  # [B, H, W, dim]\n"
                      "        return x + self.dropout(self.ffn(self.norm2(x)))"),
    "Block: attention_out skipped": ("model.py", "self.dropout(self.attention_out(self.attention(x)))",
                                     "self.dropout(self.attention(x))"),
    "Block: dropout on the sum": ("model.py", "return self.norm2(x + self.dropout(self.ffn(x)))",
                                  "return self.norm2(self.dropout(x + self.ffn(x)))"),
    "forward: the image read transposed": ("model.py", "x = self.embed(space_to_depth(images))",
                                           "x = self.embed(space_to_depth(images.transpose(2, 3)))"),
    "forward: the last block skipped": ("model.py", "for block in self.blocks:\n            x = block(x)",
                                        "for block in self.blocks[:-1]:\n            x = block(x)"),
    "forward: the mean over the wrong axes": ("model.py", "self.classifier(x.mean(dim=(1, 2)))",
                                              "self.classifier(x.mean(dim=(0, 1)))"),
    "forward: the classifier before the mean": ("model.py", "self.classifier(x.mean(dim=(1, 2)))",
                                                "self.classifier(x).mean(dim=(1, 2))"),
    "paper_flops: a Linear counted once per image": (
        "model.py", "macs.append(out.numel() * (m.in_features if isinstance(m, nn.Linear) else m.weight[0].numel()))",
        "macs.append(m.in_features * m.out_features if isinstance(m, nn.Linear) else out.numel() * m.weight[0].numel())"),
    "paper_flops: a conv's every weight per output": ("model.py", "else m.weight[0].numel()))", "else m.weight.numel()))"),
    "paper_flops: multiply-adds, not 2 x": ("model.py", "return 2 * sum(macs)", "return sum(macs)"),
}

# day 3: exercises/day3_check.py
MISTAKES[3] = {
    "the warm-up counted from 0 (step / w)": ("train.py", "return (step + 1) / w", "return step / w"),
    "the warm-up ending a step late": ("train.py", "if step < w:\n            return (step + 1) / w",
                                       "if step <= w:\n            return (step + 1) / w"),
    "the cosine counted from step 0": ("train.py", "min(1.0, (step - w) / max(1, total_steps - w))",
                                       "min(1.0, step / max(1, total_steps - w))"),
    "the cosine spread over every step": ("train.py", "min(1.0, (step - w) / max(1, total_steps - w))",
                                          "min(1.0, (step - w) / total_steps)"),
    "the hold compared as a fraction": ("train.py", "if step < held:", "if step < hold:"),
    "the query off by one on an even grid": ("measures.py", "(k // W - H // 2, k % W - W // 2)",
                                             "(k // W - (H - 1) // 2, k % W - (W - 1) // 2)"),
    "the shift as query - key": ("measures.py", "(k // W - H // 2, k % W - W // 2)",
                                 "(H // 2 - k // W, W // 2 - k % W)"),
    "the flat index split by H": ("measures.py", "(k // W - H // 2, k % W - W // 2)",
                                  "(k // H - H // 2, k % H - W // 2)"),
    "> for >=": ("measures.py", "if v >= mass}", "if v > mass}"),
    "the mass given ignored": ("measures.py", "if v >= mass}", "if v >= ONE_PIXEL}"),
    "centers truncated by int()": ("measures.py", 'for c in torch.tensor(start["centers"]).round().tolist()',
                                   'for c in torch.tensor(start["centers"]).tolist()'),
    "centers floored": ("measures.py", 'for c in torch.tensor(start["centers"]).round().tolist()',
                        'for c in torch.tensor(start["centers"]).floor().tolist()'),
    "the erf's argument without sqrt 2": ("measures.py", "scale = center_std * math.sqrt(2)", "scale = center_std"),
    "the variance for the standard deviation": ("measures.py", "scale = center_std * math.sqrt(2)",
                                                "scale = center_std**2 * math.sqrt(2)"),
    "a pixel given twice counted twice": ("measures.py", "for row, col in set(pixels))", "for row, col in pixels)"),
    "heads * q for 1 - (1 - q)^heads": ("measures.py", "1 - (1 - mass(row) * mass(col)) ** heads",
                                        "heads * mass(row) * mass(col)"),
}

# day 4: exercises/day4_check.py
MISTAKES[4] = {
    "alpha I for 2 alpha I": ("prune.py", 'else 2 * enc.alpha[:, None, None] * torch.eye(2',
                              'else enc.alpha[:, None, None] * torch.eye(2'),
    "eigvalsh read as descending: the smallest eigenvalue judged": (
        "prune.py", "largest, smallest = eig[:, 1], eig[:, 0].clamp(min=0)",
        "largest, smallest = eig[:, 0], eig[:, 1].clamp(min=0)"),
    "the diagonal for the eigenvalues": ("prune.py", "eig = torch.linalg.eigvalsh(inv_cov.detach().double())",
                                         "eig = inv_cov.detach().double().diagonal(dim1=-2, dim2=-1).sort(-1).values"),
    "a singular Sigma^-1's condition left as largest / smallest": (
        "prune.py", "condition = torch.where(smallest > 0, largest / smallest, torch.inf)",
        "condition = largest / smallest"),
    "<= for < on the largest eigenvalue": ("prune.py", '(m["largest eigenvalue"] < cfg.eigenvalue_below)',
                                           '(m["largest eigenvalue"] <= cfg.eigenvalue_below)'),
    ">= for > on the condition number": ("prune.py", '(m["condition"] > cfg.condition_above)',
                                         '(m["condition"] >= cfg.condition_above)'),
    "the paper's 1e5 for cfg.condition_above": ("prune.py", '(m["condition"] > cfg.condition_above)',
                                                '(m["condition"] > 1e5)'),
    "the encoding's rows not removed": ("prune.py", 'state[prefix + "encoding." + name] = p.detach()[keep]',
                                        'state[prefix + "encoding." + name] = p.detach()'),
    "the first heads' W_out blocks kept": ("prune.py", "W[:, keep].reshape(", "W[:, :len(keep)].reshape("),
    "W_out's columns read as [dim, heads]": (
        "prune.py", "view(layer.W_out.out_features, layer.heads, layer.dim)",
        "view(layer.W_out.out_features, layer.dim, layer.heads)"),
    "the pruned heads kept, the others removed": ("prune.py", "if h not in drop])", "if h in drop])"),
}

# day 5: exercises/day5_check.py
MISTAKES[5] = {
    "sines and cosines interleaved": ("attention.py", "return torch.cat([angle.sin(), angle.cos()], dim=1)[:, :dim]",
                                      "return torch.stack([angle.sin(), angle.cos()], dim=2).flatten(1)[:, :dim]"),
    "the table's shifts from 0": ("attention.py", "shift = torch.arange(-(n - 1), n).float()[:, None]",
                                  "shift = torch.arange(2 * n - 1).float()[:, None]"),
    "the last sine dropped for an odd dim": ("attention.py",
                                             "return torch.cat([angle.sin(), angle.cos()], dim=1)[:, :dim]",
                                             "return torch.cat([angle.sin()[:, :dim // 2], angle.cos()], dim=1)"),
    "omega without the factor 2": ("attention.py", "freq = 10000 ** (-torch.arange(0, dim, 2).float() / dim)",
                                   "freq = 10000 ** (-torch.arange((dim + 1) // 2).float() / dim)"),
    "delta read as query - key": ("attention.py", "index = delta.long() + self.grid[axis] - 1",
                                  "index = self.grid[axis] - 1 - delta.long()"),
    "the shift indexes from 0": ("attention.py", "index = delta.long() + self.grid[axis] - 1", "index = delta.long()"),
    "the rows' n for both axes": ("attention.py", "index = delta.long() + self.grid[axis] - 1",
                                  "index = delta.long() + self.grid[0] - 1"),
    "row and column tables swapped": ("attention.py", "(self.r_row, self.r_col)[axis] @",
                                      "(self.r_col, self.r_row)[axis] @"),
    "row and column halves of v swapped": ("attention.py", "@ (self.v_row, self.v_col)[axis].T",
                                           "@ (self.v_col, self.v_row)[axis].T"),
    "Student's pooled df": ("lab/experiments.py",
                            "df = (v_a + v_b) ** 2 / (v_a**2 / (x.size - 1) + v_b**2 / (y.size - 1))",
                            "df = x.size + y.size - 2.0"),
    "population variance": ("lab/experiments.py", "x.var(ddof=1) / x.size, y.var(ddof=1) / y.size",
                            "x.var() / x.size, y.var() / y.size"),
    "a one-sided p-value": ("lab/experiments.py", "p = 2 * stats.t.sf(np.abs(d) / se, df)",
                            "p = stats.t.sf(np.abs(d) / se, df)"),
    "the normal quantile": ("lab/experiments.py", "half = stats.t.ppf(0.975, df) * se",
                            "half = stats.norm.ppf(0.975) * se"),
}
