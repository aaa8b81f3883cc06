"""Register-field edits on FFMAs planted by hand with known registers (odd ones, RZ), against words
assembled by hand and refusal messages written out in full: what the mutation run showed the
other patch tests did not pin down (clearing a field's old bits, RZ among the current operands,
which register counts as the live destination, the exact refusal texts)."""

import pytest
from test_oracle_patch import K, _body, _planted, _word_at
from test_oracle_sass import ffma_words

from pytest_gpuprops import sass
from pytest_gpuprops.sass import RZ, ControlCode, Edit

PLAIN = ControlCode(2, False, None, None, 0, 0)


@pytest.fixture(scope="module")
def kernel(build):
    """test_oracle_patch's kernel: regbank_ffma (8 body FFMAs) on sm_90."""
    cubin = build("regbank_ffma.cu", "sm_90", NFFMA=8)
    return cubin, cubin.instructions(K)


@pytest.fixture(scope="module")
def odd(kernel):
    """The kernel with its first body FFMA replaced by FFMA R5, R7, R9, R11 (every field's low bit set)."""
    cubin, ins = kernel
    t = _body(ins)[0]
    return _planted(cubin, t.offset, *ffma_words(5, 7, 9, 11, PLAIN)), t.offset


def test_every_register_field_is_cleared_before_it_is_written(odd):
    """Odd registers to even ones: a field whose old bits are not all cleared reads as another register."""
    cubin, at = odd
    res = sass.patch(cubin, K, [Edit(at, regs=(4, 6, 8, 10))], scratch={4})
    assert _word_at(res.cubin, cubin, at) == ffma_words(4, 6, 8, 10, PLAIN)
    assert res.changed[0][1].text == "FFMA R4, R6, R8, R10"


def test_all_ones_fields_to_small_registers(odd):
    """RZ (255, every bit set) in every source field, then R0..R2: nothing of the 255s may stay."""
    cubin, at = odd
    rz = sass.patch(cubin, K, [Edit(at, regs=(None, RZ, RZ, RZ))], scratch={5})
    back = sass.patch(sass.Cubin(rz.cubin, cubin.arch), K, [Edit(at, regs=(None, 0, 1, 2))], scratch={5})
    assert _word_at(back.cubin, cubin, at) == ffma_words(5, 0, 1, 2, PLAIN)


def test_rz_among_the_current_operands_is_read_as_rz(kernel):
    """An FFMA that already reads RZ: a reuse-only edit keeps RZ where it is."""
    cubin, ins = kernel
    t = _body(ins)[0]
    planted = _planted(cubin, t.offset, *ffma_words(5, RZ, 9, RZ, PLAIN))
    res = sass.patch(planted, K, [Edit(t.offset, reuse=0b010)])
    assert res.changed[0][1].text == "FFMA R5, RZ, R9.reuse, RZ"
    assert _word_at(res.cubin, cubin, t.offset) == ffma_words(5, RZ, 9, RZ, ControlCode(2, False, None, None, 0, 0b010))


@pytest.mark.parametrize("regs", [(7, 5, 9, 11),   # the new destination was the old Ra; the old Rd moves to Ra
                                  (9, 7, 5, 11)])  # the new destination was the old Rb
def test_without_scratch_the_live_destination_is_the_old_rd(odd, regs):
    """Without scratch only the compiled destination (R5) may be written, whatever the sources are."""
    cubin, at = odd
    with pytest.raises(sass.PatchRefused) as e:
        sass.patch(cubin, K, [Edit(at, regs=regs)])
    assert str(e.value) == (f"{K}+{at:#06x} (FFMA R5, R7, R9, R11): writing R{regs[0]} would clobber a live "
                            "register; only the designated scratch register(s) [5] may be written")


def test_register_bound_message_in_full(kernel):
    cubin, ins = kernel
    t = _body(ins)[0]
    usable = sass.usable_registers(ins, cubin.kernel(K))
    with pytest.raises(sass.PatchRefused) as e:
        sass.patch(cubin, K, [Edit(t.offset, regs=(None, usable, 1, 2))])
    count = cubin.kernel(K).register_count
    assert str(e.value) == (f"{K}+{t.offset:#06x} ({t.text}): R{usable} in slot A is outside the registers this "
                            f"kernel's code uses (R0..R{usable - 1}; register count {count}, of which the top ones "
                            f"are reserved: reading them traps); use R0..R{usable - 1} or RZ")


def test_reuse_with_yield_message_in_full(odd):
    cubin, at = odd
    with pytest.raises(sass.PatchRefused) as e:
        sass.patch(cubin, K, [Edit(at, reuse=0b001, yield_flag=True)])
    assert str(e.value) == (f"{K}+{at:#06x} (FFMA R5, R7, R9, R11): reuse flags are ignored (and not printed) on "
                            "an instruction with the yield flag set; clear yield (yield_flag=False) to use reuse")
