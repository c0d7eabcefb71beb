// spm_shim.cc - engine/text/spm.h over libsentencepiece.
//
// The only C++ in the engine. Every entry point catches everything (bad_alloc
// included) and turns it into a strata_err, so a C caller never unwinds through C
// frames. Outputs are copied into malloc'ed buffers so the caller frees with free(),
// except spm_decode_ws's, which stay in the caller's spm_ws for reuse.
// err.h has no C++ guards of its own; strata_err_set is defined in C.
extern "C" {
#include "engine/base/err.h"
}
#include "engine/text/spm.h"

#include <sentencepiece_processor.h>

#include <cstdlib>
#include <cstring>
#include <new>
#include <string>
#include <string_view>
#include <vector>

struct spm {
    sentencepiece::SentencePieceProcessor proc;
};

static int spm_status_code(const sentencepiece::util::Status &st) {
    switch (st.code()) {
    case sentencepiece::util::StatusCode::kNotFound: return STRATA_ENOTFOUND;
    case sentencepiece::util::StatusCode::kPermissionDenied: return STRATA_EIO;
    case sentencepiece::util::StatusCode::kOutOfRange: return STRATA_ERANGE;
    case sentencepiece::util::StatusCode::kResourceExhausted: return STRATA_ENOMEM;
    default: return STRATA_EFORMAT;
    }
}

int spm_load(spm **out, const char *path, strata_err *err) {
    spm *s = nullptr;
    try {
        s = new spm;
        const sentencepiece::util::Status st = s->proc.Load(path);
        if (!st.ok()) {
            int code = spm_status_code(st);
            delete s;
            return strata_err_set(err, code, "%s: cannot load sentencepiece model: %s", path,
                                  st.ToString().c_str());
        }
        // A model that loads but has no pieces would make every id out of range.
        if (s->proc.GetPieceSize() <= 0) {
            delete s;
            return strata_err_set(err, STRATA_EFORMAT, "%s: sentencepiece model has no pieces",
                                  path);
        }
    } catch (const std::bad_alloc &) {
        delete s;
        return strata_err_set(err, STRATA_ENOMEM, "%s: out of memory loading model", path);
    } catch (const std::exception &e) {
        delete s;
        return strata_err_set(err, STRATA_EFORMAT, "%s: cannot load sentencepiece model: %s", path,
                              e.what());
    } catch (...) {
        delete s;
        return strata_err_set(err, STRATA_EFORMAT, "%s: cannot load sentencepiece model", path);
    }
    *out = s;
    return 0;
}

void spm_free(spm *s) { delete s; }

int spm_encode(const spm *s, const char *text, size_t len, int32_t **ids, size_t *n,
               strata_err *err) {
    try {
        std::vector<int> v;
        const sentencepiece::util::Status st = s->proc.Encode(std::string_view(text, len), &v);
        if (!st.ok())
            return strata_err_set(err, spm_status_code(st), "sentencepiece encode: %s",
                                  st.ToString().c_str());
        int32_t *buf =
            static_cast<int32_t *>(std::malloc((v.size() ? v.size() : 1) * sizeof(int32_t)));
        if (!buf) return strata_err_set(err, STRATA_ENOMEM, "sentencepiece encode: out of memory");
        for (size_t i = 0; i < v.size(); i++) buf[i] = v[i];
        *ids = buf;
        *n = v.size();
        return 0;
    } catch (const std::bad_alloc &) {
        return strata_err_set(err, STRATA_ENOMEM, "sentencepiece encode: out of memory");
    } catch (...) {
        return strata_err_set(err, STRATA_EFORMAT, "sentencepiece encode failed");
    }
}

struct spm_ws {
    std::vector<int> ids; // assign() keeps the capacity
    std::string text;     // Decode assigns into it, reusing its capacity
};

void spm_ws_free(spm_ws *w) { delete w; }

int spm_decode_ws(const spm *s, const int32_t *ids, size_t n, spm_ws **w, const char **text,
                  size_t *len, strata_err *err) {
    try {
        const int vocab = s->proc.GetPieceSize();
        for (size_t i = 0; i < n; i++) {
            if (ids[i] < 0 || ids[i] >= vocab)
                return strata_err_set(err, STRATA_ERANGE,
                                      "sentencepiece decode: id %d at position %zu is outside "
                                      "the vocabulary of %d",
                                      (int)ids[i], i, vocab);
        }
        if (!*w) *w = new spm_ws;
        spm_ws *ws = *w;
        ws->ids.assign(ids, ids + n);
        const sentencepiece::util::Status st = s->proc.Decode(ws->ids, &ws->text);
        if (!st.ok()) {
            ws->text.clear();
            return strata_err_set(err, spm_status_code(st), "sentencepiece decode: %s",
                                  st.ToString().c_str());
        }
        *text = ws->text.c_str();
        *len = ws->text.size();
        return 0;
    } catch (const std::bad_alloc &) {
        return strata_err_set(err, STRATA_ENOMEM, "sentencepiece decode: out of memory");
    } catch (...) {
        return strata_err_set(err, STRATA_EFORMAT, "sentencepiece decode failed");
    }
}

int spm_decode(const spm *s, const int32_t *ids, size_t n, char **text, size_t *len,
               strata_err *err) {
    spm_ws *w = nullptr;
    const char *t;
    size_t tl;
    int r = spm_decode_ws(s, ids, n, &w, &t, &tl, err);
    if (!r) {
        char *buf = static_cast<char *>(std::malloc(tl + 1));
        if (buf) {
            std::memcpy(buf, t, tl + 1);
            *text = buf;
            *len = tl;
        } else r = strata_err_set(err, STRATA_ENOMEM, "sentencepiece decode: out of memory");
    }
    spm_ws_free(w);
    return r;
}

int spm_vocab_size(const spm *s) { return s->proc.GetPieceSize(); }

const char *spm_id_to_piece(const spm *s, int32_t id) {
    if (id < 0 || id >= s->proc.GetPieceSize()) return nullptr;
    try {
        // IdToPiece returns a reference into the model proto, stable while s lives.
        return s->proc.IdToPiece(id).c_str();
    } catch (...) {
        return nullptr;
    }
}

int32_t spm_piece_to_id(const spm *s, const char *piece) {
    try {
        const int id = s->proc.PieceToId(piece);
        // PieceToId maps every unknown string to unk_id; only the unk piece itself
        // should get that answer.
        if (id < 0 || (id == s->proc.unk_id() && s->proc.IdToPiece(id) != piece)) return -1;
        return id;
    } catch (...) {
        return -1;
    }
}

int32_t spm_bos_id(const spm *s) { return s->proc.bos_id(); }

int32_t spm_eos_id(const spm *s) { return s->proc.eos_id(); }
