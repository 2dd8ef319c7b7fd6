"""The drafter: its engine-free definition and the model SGLang loads.

Engine-free (plain PyTorch and transformers, no SGLang; the oracle every engine path is tested
against):
    config.py        the published config.json -> DFlashConfig, validated, naming the field
    generations.py   which architectures and variants SGLang's built-in loads are served here
    variants.py      the variants' config fields, read and written as SGLang does
    conv.py          the grouped-convolution variant; selector.py: DFlash2's candidate selector;
    domino.py        Domino's GRU-corrected rollout; laguna.py: Laguna's gate and feature norms
    model.py         DFlashDraftModel: the drafter in plain PyTorch (`from_pretrained`,
                     `spec_generate` as on the model cards)
    context.py       what it reads of the target: the captured layers' features, their K/V
    reference.py     dflash_generate / spec_generate: z-lab's decoding loop, chain or tree
SGLang side:
    sglang_model.py  the drafter as SGLang loads it: model.py's math over RadixAttention
    sglang_layers.py its decoder layers sharded over TP ranks (SGLang's parallel linears)
    sampled_walk.py  DFlash2's sampled walk at T > 0 (SGLang's sample_path)

May import: errors, sampling/ and tree/ (the acceptance rules and trees the reference decodes with),
and SGLang in the sglang_* modules only.
"""
