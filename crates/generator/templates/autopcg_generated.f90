! autopcg_generated.f90: Fortran interfaces to the C API of a solver emitted by {{VERSION}} from one
! plan (include/autopcg_generated.h). Fortran 2003 (iso_c_binding); pass index_base = 1 for
! Fortran's 1-based CSR arrays.
!
!   use autopcg_generated
!   type(c_ptr) :: solver
!   type(autopcg_gen_params) :: params
!   type(autopcg_gen_info) :: info
!   ierr = autopcg_gen_setup(n, row_ptr, col_idx, values, 1_c_int32_t, 0_c_int32_t, solver)
!   call autopcg_gen_default_params(params)
!   ierr = autopcg_gen_solve(solver, b, x, params, info)
!   call autopcg_gen_destroy(solver)
module autopcg_generated
  use, intrinsic :: iso_c_binding
  implicit none

  integer(c_int), parameter :: AUTOPCG_GEN_OK = 0
  integer(c_int), parameter :: AUTOPCG_GEN_ERR_INPUT = 1
  integer(c_int), parameter :: AUTOPCG_GEN_ERR_PLAN = 2
  integer(c_int), parameter :: AUTOPCG_GEN_ERR_CUDA = 3
  integer(c_int), parameter :: AUTOPCG_GEN_ERR_INTERNAL = 4
  integer(c_int32_t), parameter :: AUTOPCG_GEN_CONVERGED = 0
  integer(c_int32_t), parameter :: AUTOPCG_GEN_MAX_ITER = 1
  integer(c_int32_t), parameter :: AUTOPCG_GEN_STAGNATED = 2
  integer(c_int32_t), parameter :: AUTOPCG_GEN_NOT_SPD = 3
  integer(c_int32_t), parameter :: AUTOPCG_GEN_BREAKDOWN = 4
  integer(c_int32_t), parameter :: AUTOPCG_GEN_FORCE = 1
  integer(c_int32_t), parameter :: AUTOPCG_GEN_ANY_DEVICE = 2

  type, bind(C) :: autopcg_gen_params
    real(c_double) :: tol
    integer(c_int64_t) :: max_iter
    integer(c_int32_t) :: record_history
    integer(c_int32_t) :: reserved
  end type autopcg_gen_params

  type, bind(C) :: autopcg_gen_info
    integer(c_int64_t) :: iterations
    integer(c_int32_t) :: converged
    integer(c_int32_t) :: reason
    real(c_double) :: relative_residual
    real(c_double) :: recurrence_relative_residual
    real(c_double) :: rhs_norm
    integer(c_int64_t) :: residual_replacements
    real(c_double) :: upload_ms
    real(c_double) :: solve_ms
  end type autopcg_gen_info

  interface
    subroutine autopcg_gen_default_params(params) bind(C, name="autopcg_gen_default_params")
      import :: autopcg_gen_params
      type(autopcg_gen_params), intent(out) :: params
    end subroutine autopcg_gen_default_params

    integer(c_int) function autopcg_gen_setup(n, row_ptr, col_idx, values, index_base, flags, &
        solver) bind(C, name="autopcg_gen_setup")
      import :: c_int, c_int32_t, c_double, c_ptr
      integer(c_int32_t), value :: n
      integer(c_int32_t), intent(in) :: row_ptr(*), col_idx(*)
      real(c_double), intent(in) :: values(*)
      integer(c_int32_t), value :: index_base
      integer(c_int32_t), value :: flags
      type(c_ptr), intent(out) :: solver
    end function autopcg_gen_setup

    integer(c_int) function autopcg_gen_solve(solver, b, x, params, info) &
        bind(C, name="autopcg_gen_solve")
      import :: c_int, c_double, c_ptr, autopcg_gen_params, autopcg_gen_info
      type(c_ptr), value :: solver
      real(c_double), intent(in) :: b(*)
      real(c_double), intent(inout) :: x(*)
      type(autopcg_gen_params), intent(in) :: params
      type(autopcg_gen_info), intent(out) :: info
    end function autopcg_gen_solve

    integer(c_int) function autopcg_gen_update_values(solver, values) &
        bind(C, name="autopcg_gen_update_values")
      import :: c_int, c_double, c_ptr
      type(c_ptr), value :: solver
      real(c_double), intent(in) :: values(*)
    end function autopcg_gen_update_values

    subroutine autopcg_gen_destroy(solver) bind(C, name="autopcg_gen_destroy")
      import :: c_ptr
      type(c_ptr), value :: solver
    end subroutine autopcg_gen_destroy

    type(c_ptr) function autopcg_gen_last_error_c() bind(C, name="autopcg_gen_last_error")
      import :: c_ptr
    end function autopcg_gen_last_error_c
  end interface

contains

  ! The last error message of this thread as a Fortran string.
  function autopcg_gen_last_error() result(msg)
    character(len=:), allocatable :: msg
    character(kind=c_char), pointer :: chars(:)
    type(c_ptr) :: p
    integer :: i, n
    interface
      integer(c_size_t) function c_strlen(s) bind(C, name="strlen")
        import :: c_ptr, c_size_t
        type(c_ptr), value :: s
      end function c_strlen
    end interface
    p = autopcg_gen_last_error_c()
    n = int(c_strlen(p))
    call c_f_pointer(p, chars, [n])
    allocate(character(len=n) :: msg)
    do i = 1, n
      msg(i:i) = chars(i)
    end do
  end function autopcg_gen_last_error

end module autopcg_generated
