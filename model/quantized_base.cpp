#include "model/quantized_base.h"

#include <algorithm>
#include <map>

#include "core/bfloat16.h"
#include "core/error.h"
#include "backend/nf4.h"
#include "model/architecture.h"

namespace feast {
namespace {

// The specs of `table` that keep(spec) accepts, with ties renumbered (a tie whose target is
// dropped cannot happen: only untied block weights are stored apart).
ParamTable filtered(const ParamTable& table, bool apart) {
  std::vector<ParamSpec> specs;
  std::vector<int> index_of(table.specs().size(), -1);
  for (size_t i = 0; i < table.specs().size(); ++i) {
    const ParamSpec& s = table.specs()[i];
    if (stored_apart(s) != apart) continue;
    index_of[i] = int(specs.size());
    specs.push_back(s);
    if (s.tied_to >= 0) {
      FEAST_CHECK(index_of[size_t(s.tied_to)] >= 0, s.name << " is tied to a tensor stored apart");
      specs.back().tied_to = index_of[size_t(s.tied_to)];
    }
  }
  return ParamTable(std::move(specs));
}

size_t max_numel(const LocalTable& table) {
  size_t m = 0;
  for (const LocalParam& p : table.params()) m = std::max(m, p.numel);
  return m;
}

}  // namespace

bool stored_apart(const ParamSpec& spec) {
  const std::string& n = spec.name;
  if (!n.starts_with("layers.") || spec.tied_to >= 0) return false;
  for (const char* product : {".attn.qkv.weight", ".attn.proj.weight", ".mlp.fc.weight", ".mlp.proj.weight"})
    if (n.ends_with(product)) return true;
  return false;
}

bool base_stored_apart(const LoraSpec& lora, DType compute) {
  if (!lora.enabled()) return false;
  return lora.base == BaseFormat::kNf4 || (lora.base == BaseFormat::kBf16 && compute != DType::kBFloat16);
}

ParamTable without_stored_apart(const ParamTable& table) { return filtered(table, false); }
ParamTable stored_apart_only(const ParamTable& table) { return filtered(table, true); }

std::vector<int64_t> quantization_units(const ModelConfig& config, const ParamSpec& spec) {
  // Llama's q, k, v and gate, up are separate nn.Linear modules in Hugging Face; GPT-2's c_attn
  // is one Conv1D. Both quantize (out, in) row-major, as bitsandbytes quantizes the transposed
  // Conv1D weight.
  if (config.is_llama() && !spec.blocks.empty()) return spec.blocks;
  return {spec.shape[0]};
}

QuantizedBase::Layout QuantizedBase::layout(const ModelConfig& config, const LocalTable& table, BaseFormat format,
                                            bool double_quant) {
  FEAST_CHECK(format == BaseFormat::kBf16 || format == BaseFormat::kNf4, "a quantized base of the compute dtype");
  FEAST_CHECK(!double_quant || format == BaseFormat::kNf4, "double quantization of a bfloat16 base");
  Layout l;
  auto take = [](size_t& arena, size_t n) {
    const Span span{arena, n};
    arena += n;
    return span;
  };
  if (double_quant) l.scale_code = take(l.floats, 256);
  for (const LocalParam& p : table.params()) {
    Stored s;
    s.param = &p;
    if (format == BaseFormat::kBf16) {
      s.bf16 = take(l.halves, p.numel);
      l.stored.push_back(std::move(s));
      continue;
    }
    const int64_t width = p.spec->shape[1], cols = p.shape[1];
    const std::vector<int64_t> units = quantization_units(config, *p.spec);
    for (const LogicalSlice& slice : p.logical_slices()) {
      FEAST_CHECK(slice.count[1] == cols, p.spec->name << ": a slice of " << slice.count[1] << " of " << cols
                                                       << " local columns");
      const int64_t r = slice.start[0], nr = slice.count[0];
      int64_t u0 = 0;
      for (int64_t unit_rows : units) {
        const int64_t begin = std::max(r, u0), end = std::min(r + nr, u0 + unit_rows);
        u0 += unit_rows;
        if (begin >= end) continue;
        Piece piece;
        piece.local_row = int(int64_t(slice.local_offset) / cols + (begin - r));
        piece.unit_row_begin = size_t(u0 - unit_rows);
        piece.unit_rows = size_t(unit_rows);
        Nf4Piece& q = piece.nf4;
        q.row0 = begin - int64_t(piece.unit_row_begin);
        q.col0 = slice.start[1];
        q.width = width;
        q.rows = int(end - begin);
        q.cols = int(cols);
        q.scales_per_row = nf4_scales_per_row(q.row0, q.col0, width, q.rows, q.cols);
        const size_t elems = size_t(q.rows) * size_t(q.cols), slots = size_t(q.rows) * size_t(q.scales_per_row);
        piece.codes = take(l.bytes, (elems + 1) / 2);
        if (double_quant) {
          piece.scales = take(l.bytes, slots);
          const size_t blocks = (piece.unit_rows * size_t(width) + kNf4BlockSize - 1) / kNf4BlockSize;
          piece.absmax2 = take(l.floats, (blocks + kNf4GroupSize - 1) / kNf4GroupSize);
        } else {
          piece.scales = take(l.floats, slots);
        }
        s.pieces.push_back(piece);
      }
    }
    l.stored.push_back(std::move(s));
  }
  return l;
}

QuantizedBase::Size QuantizedBase::planned(const ModelConfig& config, const StageSpec& stage, BaseFormat format,
                                           bool double_quant) {
  const ParamTable logical = stored_apart_only(decoder_param_table(config));
  const LocalTable table(logical, stage);
  const Layout l = layout(config, table, format, double_quant);
  return {l.bytes + l.floats * sizeof(float) + l.halves * sizeof(uint16_t), max_numel(table)};
}

QuantizedBase::QuantizedBase(const ModelConfig& config, const StageSpec& stage, BaseFormat format,
                             bool double_quant, Backend& backend)
    : backend_(backend),
      format_(format),
      double_quant_(double_quant),
      logical_(stored_apart_only(decoder_param_table(config))),
      table_(logical_, stage) {
  Layout l = layout(config, table_, format, double_quant);
  bytes_ = backend.allocate(DType::kUInt8, l.bytes);
  floats_ = backend.allocate(DType::kFloat32, l.floats);
  halves_ = backend.allocate(DType::kBFloat16, l.halves);
  auto view = [](const Tensor& arena, const Span& span) { return arena.view().slice(span.at, span.n); };
  scale_code_ = view(floats_, l.scale_code);
  stored_ = std::move(l.stored);
  for (Stored& s : stored_) {
    s.bf16_values = view(halves_, s.bf16);
    for (Piece& piece : s.pieces) {
      Nf4Piece& q = piece.nf4;
      q.codes = view(bytes_, piece.codes);
      q.scales = view(double_quant ? bytes_ : floats_, piece.scales);
      if (double_quant) {
        q.absmax2 = view(floats_, piece.absmax2);
        q.scale_code = scale_code_;
      }
    }
  }
}

void QuantizedBase::load(const LogicalTensorSource& source) {
  if (double_quant_) {
    const std::array<float, 256>& code = nf4_scale_code();
    backend_.copy(scale_code_, host_view(code.data(), code.size()));
  }
  for (Stored& s : stored_) {
    const LocalParam& p = *s.param;
    const std::vector<float> whole = source(*p.spec);
    FEAST_CHECK(whole.size() == p.spec->numel, p.spec->name << ": " << whole.size() << " values for " << p.spec->numel);
    if (format_ == BaseFormat::kBf16) {
      std::vector<uint16_t> bits(p.numel);
      for (size_t i = 0; i < p.numel; ++i) bits[i] = float_to_bf16(whole[size_t(p.logical_index(int64_t(i)))]);
      backend_.copy(s.bf16_values, TensorView{bits.data(), DType::kBFloat16, kCpu, bits.size()});
      continue;
    }
    const size_t width = size_t(p.spec->shape[1]);
    std::map<size_t, Nf4Tensor> units;  // by first row: each unit quantized once
    for (Piece& piece : s.pieces) {
      auto it = units.find(piece.unit_row_begin);
      if (it == units.end())
        it = units.emplace(piece.unit_row_begin, quantize_nf4(whole.data() + piece.unit_row_begin * width,
                                                              piece.unit_rows * width, double_quant_)).first;
      const Nf4Tensor& t = it->second;
      Nf4Piece& q = piece.nf4;
      const Nf4PieceData d = nf4_piece_data(t, q.width, q.row0, q.col0, q.rows, q.cols);
      backend_.copy(q.codes, host_view(d.codes.data(), d.codes.size()));
      if (double_quant_) {
        backend_.copy(q.scales, host_view(d.scale_codes.data(), d.scale_codes.size()));
        backend_.copy(q.absmax2, host_view(t.absmax2.data(), t.absmax2.size()));
        q.offset = t.offset;
      } else {
        backend_.copy(q.scales, host_view(d.absmax.data(), d.absmax.size()));
      }
    }
  }
}

TensorView QuantizedBase::materialize(const LocalParam& p, const TensorView& scratch) const {
  // stored_ follows table_'s tensors one for one.
  const size_t index = size_t(&p - table_.params().data());
  FEAST_CHECK(index < stored_.size() && stored_[index].param == &p, p.spec->name << " is not stored in the quantized base");
  const Stored* s = &stored_[index];
  const TensorView out = scratch.first(p.numel);
  if (format_ == BaseFormat::kBf16) {
    backend_.cast(out, s->bf16_values);
    return out;
  }
  const size_t cols = size_t(p.shape[1]);
  for (const Piece& piece : s->pieces)
    backend_.dequantize_nf4(out.slice(size_t(piece.local_row) * cols, size_t(piece.nf4.rows) * cols), piece.nf4);
  return out;
}

size_t QuantizedBase::bytes() const { return bytes_.bytes() + floats_.bytes() + halves_.bytes(); }

size_t QuantizedBase::max_local_numel() const { return max_numel(table_); }

}  // namespace feast
