package contract

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestMappingV1(t *testing.T) {
	m := DefaultMapping()
	if m.Name != "opfamily" || m.Version != 1 || len(m.SHA256) != 64 {
		t.Fatalf("built-in mapping %s", m.Label())
	}
	moe, route, attn := uint64(0), uint64(0), uint64(0)
	for i, re := range m.scopeMatchers() {
		switch {
		case re.MatchString("nn.Module: Qwen3MoeExperts_0"):
			moe = 1 << i
		case re.MatchString("nn.Module: Qwen3MoeTopKRouter_3"):
			route = 1 << i
		case re.MatchString("nn.Module: Qwen3MoeAttention_5"):
			attn = 1 << i
		}
	}
	if moe == 0 || route == 0 || attn == 0 {
		t.Fatalf("scopes: moe %b route %b attention %b", moe, route, attn)
	}
	for _, notMoE := range []string{"nn.Module: Qwen3MoeDecoderLayer_0", "nn.Module: Qwen3MoeForCausalLM_0", "nn.Module: Qwen3MoeModel_0"} {
		for i, re := range m.scopeMatchers() {
			if re.MatchString(notMoE) {
				t.Errorf("%s holds scope %d", notMoE, i)
			}
		}
	}
	cases := []struct {
		name   string
		scopes uint64
		want   string
	}{
		{"void vllm::moe::topkGatingSoftmax<8>", 0, "moe_router"},
		{"void at::native::sbtopk::gatherTopK<float, unsigned int, 2, false>", route, "moe_router"},
		{"void at::native::sbtopk::gatherTopK<float, unsigned int, 2, false>", 0, "sampler"},
		{"void at::native::radixSortKVInPlace<-2, -1, 128, 32, long, long, unsigned int>", moe, "moe_router"},
		{"ncclDevKernel_AllReduce_Sum_bf16_RING_LL", moe, "collective"},
		{"cudnn_generated_fort_native_sdpa_sm90_flash_fprop_wgmma_f16_knob_7_64x128x64_4x1x1_cga1x1x1_kernel0_0", 0, "attention"},
		{"void cutlass::Kernel2<cutlass_80_simt_sgemm_128x32_8x5_nn_align1>", attn, "attention"},
		{"_ZN7cutlass13device_kernelIN2at4cuda6detail25enable_3x_kernel_for_sm9xINS_4gemm6kernel13GemmUniversalINS5_17GroupProblemShape", moe, "moe_gemm"},
		{"_ZN7cutlass13device_kernelIN2at4cuda6detail25enable_3x_kernel_for_sm9xINS_4gemm6kernel13GemmUniversalINS5_17GroupProblemShape", 0, "dense_gemm"},
		{"nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_TNT", 0, "moe_gemm"}, // the seed's v1 names nvjet under moe_gemm
		{"fused_moe_kernel", 0, "moe_gemm"},
		{"void cutlass::Kernel2<cutlass_80_simt_sgemm_128x32_8x5_nn_align1>", 0, "dense_gemm"},
		{"void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::MeanOps<float, float, float, float>", 0, "norm_elementwise"},
		{"void vllm::reshape_and_cache_flash_kernel<__nv_bfloat16>", 0, "attention"},
		{"void vllm::copy_blocks_kernel<float>", 0, "kv_memory"},
		{"void at::native::vectorized_gather_kernel<16, long>(char*, char*, long*, int, long, long, long, long, bool)", 0, "other"},
	}
	for _, c := range cases {
		if got := m.Classify(c.name, c.scopes); got != c.want {
			t.Errorf("Classify(%.50q, %b) = %s, want %s", c.name, c.scopes, got, c.want)
		}
	}
}

func TestMappingParseErrors(t *testing.T) {
	bad := map[string]string{
		"unknown key":     "name: x\nversion: 1\nrules: [{family: a, name: b}]\nextra: 1\n",
		"no version":      "name: x\nrules: [{family: a, name: b}]\n",
		"no rules":        "name: x\nversion: 1\n",
		"no family":       "name: x\nversion: 1\nrules: [{name: b}]\n",
		"family other":    "name: x\nversion: 1\nrules: [{family: other, name: b}]\n",
		"bad pattern":     "name: x\nversion: 1\nrules: [{family: a, name: '('}]\n",
		"unknown scope":   "name: x\nversion: 1\nrules: [{family: a, name: b, scope: [moe]}]\n",
		"bad scope regex": "name: x\nversion: 1\nscopes: {moe: '['}\nrules: [{family: a, name: b}]\n",
	}
	for name, doc := range bad {
		if _, err := ParseMapping([]byte(doc)); err == nil {
			t.Errorf("%s: parsed", name)
		}
	}
	// an amendment: another table, named by its own hash in the verdict
	p := filepath.Join(t.TempDir(), "opfamily-v2.yaml")
	os.WriteFile(p, []byte("name: opfamily\nversion: 2\nrules: [{family: everything, name: '.'}]\n"), 0o644)
	m, err := LoadMapping(p)
	if err != nil || m.Version != 2 || !strings.HasPrefix(m.Label(), "opfamily/v2 sha256:") || m.SHA256 == DefaultMapping().SHA256 {
		t.Fatalf("%v %v", m, err)
	}
	if _, err := LoadMapping(filepath.Join(t.TempDir(), "absent.yaml")); err == nil {
		t.Fatal("absent mapping loaded")
	}
}
