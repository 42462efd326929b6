//! NVRTC compilation of one module ([`ModuleSpec`]) to PTX (a virtual `compute_XY` target) or
//! to a CUBIN (machine code for a real `sm_XY` GPU). Needs `libnvrtc`, not a GPU.
use std::ffi::{c_char, CString};

use cudarc::nvrtc::{result as nres, sys as nsys};

use crate::probe::{guarded, nvrtc_version};
use crate::sources::{ModuleSpec, HEADERS};
use crate::GpuError;

/// What NVRTC should produce.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
pub enum Target {
    /// PTX for the virtual architecture `compute_XY` (XY = 10 * major + minor); the driver
    /// translates it when loading.
    Ptx(u32),
    /// Machine code for the real architecture `sm_XY`, loaded without translation.
    Cubin(u32),
}

impl Target {
    /// The `--gpu-architecture` value.
    pub fn arch_flag(self) -> String {
        match self {
            Target::Ptx(a) => format!("compute_{a}"),
            Target::Cubin(a) => format!("sm_{a}"),
        }
    }

    /// The usual target for a device of compute capability (major, minor): its CUBIN.
    pub fn for_capability(major: u32, minor: u32) -> Target {
        Target::Cubin(10 * major + minor)
    }
}

/// The NVRTC options used for `spec` and `target`, in order.
pub fn compile_options(spec: &ModuleSpec, target: Target) -> Vec<String> {
    let mut o = vec![
        format!("--gpu-architecture={}", target.arch_flag()),
        "--std=c++17".to_string(),
    ];
    o.extend(spec.define_options());
    o
}

/// Owns an nvrtcProgram and destroys it on every path.
struct Program(nsys::nvrtcProgram);

impl Drop for Program {
    fn drop(&mut self) {
        // SAFETY: the program was created by nvrtcCreateProgram and is destroyed once. A failure
        // to destroy leaks the program and is not worth reporting.
        let _ = unsafe { nres::destroy_program(self.0) };
    }
}

fn nvrtc_err(during: &str, e: nres::NvrtcError) -> GpuError {
    GpuError::Nvrtc {
        during: during.to_string(),
        code: format!("{:?}", e.0),
    }
}

fn c_chars_to_string(v: &[c_char]) -> String {
    let bytes: Vec<u8> = v.iter().map(|&c| c as u8).take_while(|&b| b != 0).collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

fn cstring(what: &str, s: &str) -> Result<CString, GpuError> {
    CString::new(s).map_err(|e| GpuError::InvalidInput {
        what: what.to_string(),
        reason: format!("contains a NUL byte at offset {}", e.nul_position()),
    })
}

/// Compiles `spec` for `target`. Returns the image: PTX text with its terminating NUL, or the
/// CUBIN bytes. A compile error carries NVRTC's log.
pub fn compile_module(spec: &ModuleSpec, target: Target) -> Result<Vec<u8>, GpuError> {
    compile_source(
        &spec.to_string(),
        spec.source.file_name(),
        crate::sources::source_text(spec.source),
        &HEADERS,
        &compile_options(spec, target),
        target,
    )
}

/// The NVRTC options of a source compiled for `target` without defines (all its knobs fixed in
/// the text).
pub fn base_options(target: Target) -> Vec<String> {
    compile_options(&ModuleSpec::plain(crate::KernelSource::Vector), target)
}

/// Compiles the CUDA source `text` (file name `file`, named `label` in errors) with `headers`
/// (name, text) available to `#include "name"`, and NVRTC `options` that must include the
/// architecture of `target`. Returns the image as [`compile_module`] does. This is how text
/// that is not one of the pool's sources (the kernel files of an emitted solver) is checked.
pub fn compile_source(
    label: &str,
    file: &str,
    text: &str,
    headers: &[(&str, &str)],
    options: &[String],
    target: Target,
) -> Result<Vec<u8>, GpuError> {
    nvrtc_version()?;
    let src = cstring(file, text)?;
    let name = cstring("kernel file name", file)?;
    let mut hdr_src = Vec::with_capacity(headers.len());
    let mut hdr_name = Vec::with_capacity(headers.len());
    for (n, t) in headers {
        hdr_name.push(cstring("header name", n)?);
        hdr_src.push(cstring(n, t)?);
    }
    let hdr_src_ptrs: Vec<*const c_char> = hdr_src.iter().map(|c| c.as_ptr()).collect();
    let hdr_name_ptrs: Vec<*const c_char> = hdr_name.iter().map(|c| c.as_ptr()).collect();
    let options = options.to_vec();

    guarded("libnvrtc", || {
        let mut raw: nsys::nvrtcProgram = std::ptr::null_mut();
        // SAFETY: every pointer refers to a NUL-terminated string that outlives the program
        // (they are dropped after `prog`), and the header arrays have headers.len() entries.
        unsafe {
            nsys::nvrtcCreateProgram(
                &mut raw,
                src.as_ptr(),
                name.as_ptr(),
                hdr_src_ptrs.len() as i32,
                hdr_src_ptrs.as_ptr(),
                hdr_name_ptrs.as_ptr(),
            )
        }
        .result()
        .map_err(|e| nvrtc_err("nvrtcCreateProgram", e))?;
        let prog = Program(raw);
        // SAFETY: `prog` is a live program created above.
        if let Err(e) = unsafe { nres::compile_program(prog.0, &options) } {
            // SAFETY: as above; reading the log of a failed compilation is allowed.
            let log = unsafe { nres::get_program_log(prog.0) }
                .map(|l| c_chars_to_string(&l))
                .unwrap_or_else(|le| format!("(no log: {:?})", le.0));
            return Err(GpuError::Compile {
                file: label.to_string(),
                options: options.clone(),
                code: format!("{:?}", e.0),
                log,
            });
        }
        match target {
            Target::Ptx(_) => {
                // SAFETY: `prog` compiled successfully.
                let ptx =
                    unsafe { nres::get_ptx(prog.0) }.map_err(|e| nvrtc_err("nvrtcGetPTX", e))?;
                let mut bytes: Vec<u8> = ptx.iter().map(|&c| c as u8).collect();
                if bytes.last() != Some(&0) {
                    bytes.push(0);
                }
                Ok(bytes)
            }
            Target::Cubin(_) => {
                let mut size = 0usize;
                // SAFETY: `prog` compiled successfully for a real architecture; `size` is valid.
                unsafe { nsys::nvrtcGetCUBINSize(prog.0, &mut size) }
                    .result()
                    .map_err(|e| nvrtc_err("nvrtcGetCUBINSize", e))?;
                let mut buf = vec![0u8; size];
                // SAFETY: `buf` holds exactly the `size` bytes NVRTC announced.
                unsafe { nsys::nvrtcGetCUBIN(prog.0, buf.as_mut_ptr() as *mut c_char) }
                    .result()
                    .map_err(|e| nvrtc_err("nvrtcGetCUBIN", e))?;
                Ok(buf)
            }
        }
    })
}

/// True when a compiled image exports the kernel `entry`: a `.entry entry(` line in PTX, or the
/// NUL-delimited symbol name in a CUBIN's string table.
pub fn image_has_entry(image: &[u8], target: Target, entry: &str) -> bool {
    match target {
        Target::Ptx(_) => {
            let text = String::from_utf8_lossy(image);
            let pat = format!(".entry {entry}(");
            text.contains(&pat)
        }
        Target::Cubin(_) => {
            let mut pat = Vec::with_capacity(entry.len() + 2);
            pat.push(0u8);
            pat.extend_from_slice(entry.as_bytes());
            pat.push(0u8);
            image.windows(pat.len()).any(|w| w == pat.as_slice())
        }
    }
}
